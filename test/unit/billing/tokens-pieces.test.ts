import { describe, expect, it } from 'vitest'
import { countingPieces } from '../../../src/billing/tokens.ts'

// Where countingPieces cuts, exactly, on small caps and sizes: a cut at a place o200k always splits
// ("soft") ends a piece only once the piece has `size` characters; a hard cut always ends one.

const pieces = (text: string, cap: number, size: number) => [...countingPieces(text, cap, size)]

/** Every code point of the Basic Multilingual Plane but the surrogates, space and tab. */
const BMP: string[] = []
for (let c = 0; c <= 0xffff; c++) {
  if ((c >= 0xd800 && c <= 0xdfff) || c === 0x20 || c === 0x09) continue
  BMP.push(String.fromCharCode(c))
}

const isSpace = (s: string) => /^\s$/u.test(s)
const isLetter = (s: string) => /^\p{L}$/u.test(s)
const isLetterOrMark = (s: string) => /^[\p{L}\p{M}]$/u.test(s)
const isNumber = (s: string) => /^\p{N}$/u.test(s)

/**
 * Whether countingPieces cuts between `before` and `at` softly. With a cap of 2 the only place it may
 * cut 'x' + before + at + 'y' is between the two; the size is never reached, so a soft cut leaves one
 * piece and a hard one the two halves.
 */
function softCut(before: string, at: string): boolean | string[] {
  const out = pieces(`x${before}${at}y`, 2, 1000)
  if (out.length === 1) return true
  return out.length === 2 && out[0] === `x${before}` && out[1] === `${at}y` ? false : out
}

/** The characters for which `actual` differs from `expected` (none, when countingPieces is right). */
function mismatches<T>(chars: string[], actual: (c: string) => T, expected: (c: string) => T): string[] {
  return chars.filter((c) => JSON.stringify(actual(c)) !== JSON.stringify(expected(c)))
}

describe('countingPieces on small caps and sizes', () => {
  it('yields nothing for empty text and one piece for text up to cap + 1 characters', () => {
    expect(pieces('', 4, 1000)).toEqual([])
    expect(pieces('A', 4, 1)).toEqual(['A'])
    expect(pieces('ACGTA', 4, 1000)).toEqual(['ACGTA'])
    expect(pieces('ACGTAC', 4, 1000)).toEqual(['ACGT', 'AC'])
    expect(pieces('ACGTACGTACGTA', 4, 1000)).toEqual(['ACGT', 'ACGT', 'ACGTA'])
  })

  it('cuts before each word, ending a piece once it has `size` characters', () => {
    expect(pieces('ab cd ef gh', 100, 1)).toEqual(['ab', ' cd', ' ef', ' gh'])
    expect(pieces('ab cd ef gh', 100, 3)).toEqual(['ab cd', ' ef', ' gh'])
    expect(pieces('ab cd ef gh', 100, 6)).toEqual(['ab cd ef', ' gh'])
    expect(pieces('ab cd ef gh', 100, 9)).toEqual(['ab cd ef gh'])
    // Not inside a run of spaces or tabs: before its first one.
    expect(pieces('ab  cd\t\tef', 100, 1)).toEqual(['ab', '  cd', '\t\tef'])
    expect(pieces(' ab', 100, 1)).toEqual([' ab'])
  })

  it('cuts a long run at the last place o200k splits in the last half of the cap', () => {
    // cap 8: the run from 0 may be cut at 5 to 8; a '.' after a letter is such a place.
    expect(pieces('abcde.fghijklmn', 8, 1000)).toEqual(['abcde.fghijkl', 'mn'])
    expect(pieces('abcde.fghijklmn', 8, 1)).toEqual(['abcde', '.fghijkl', 'mn'])
    expect(pieces('abcdefgh.ijklmn', 8, 1000)).toEqual(['abcdefgh.ijklmn'])
    expect(pieces('abcdefgh.ijklmn', 8, 1)).toEqual(['abcdefgh', '.ijklmn'])
    expect(pieces('abc.d.fghijklmn', 8, 1)).toEqual(['abc.d', '.fghijkl', 'mn'])
    // At 4 or at 9 it is out of reach: cut hard at 8.
    expect(pieces('abcd.efghijklmn', 8, 1000)).toEqual(['abcd.efg', 'hijklmn'])
    expect(pieces('abcdefghi.jklmn', 8, 1000)).toEqual(['abcdefgh', 'i.jklmn'])
    // A soft cut of a long run counts towards the size like any other.
    expect(pieces('abcde.fghij.klmno.pq', 8, 10)).toEqual(['abcde.fghij', '.klmno.pq'])
  })

  it('looks at every place of a long run again after cutting it', () => {
    // The run is cut at 5 when the space at 9 is reached; the space is still a cut after that.
    expect(pieces('abcde.fgh ijklmn', 8, 1)).toEqual(['abcde', '.fgh', ' ijklmn'])
    expect(pieces('abcdefghi jklmnop', 8, 1)).toEqual(['abcdefgh', 'i', ' jklmnop'])
  })

  it('never cuts between the two halves of a surrogate pair', () => {
    // A hard cut that would fall inside a pair comes one character earlier.
    expect(pieces(`a${'😀'.repeat(5)}`, 4, 1000)).toEqual(['a😀', '😀😀', '😀😀'])
    // U+20000 is \ud840\udc00, U+203FF is \ud840\udfff: letters, at either end of the low surrogates.
    for (const cjk of ['\u{20000}', '\u{203FF}']) {
      expect(pieces(`x${cjk.repeat(4)}`, 4, 1000)).toEqual([`x${cjk}`, cjk.repeat(2), cjk])
      expect(pieces(`x${cjk.repeat(4)}`, 3, 1000)).toEqual([`x${cjk}`, cjk, cjk.repeat(2)])
    }
  })

  it('reads a letter outside the BMP before a cut as one code point', () => {
    expect(pieces('\u{20000}.ab', 2, 1000)).toEqual(['\u{20000}.ab'])
    expect(pieces('\u{20000}.ab', 2, 1)).toEqual(['\u{20000}', '.ab'])
    expect(pieces('x\u{20000}.ab', 3, 1000)).toEqual(['x\u{20000}.ab'])
    expect(pieces('😀.ab', 2, 1000)).toEqual(['😀', '.ab'])
    // A lone low surrogate is no letter.
    expect(pieces('\udc00.ab', 1, 1000)).toEqual(['\udc00', '.', 'ab'])
  })

  it('cuts before a space or tab exactly when the character before it is not \\s', () => {
    const cut = (w: string) => pieces(`a${w} b`, 100, 1)
    const expected = (w: string) =>
      !isSpace(w) ? [`a${w}`, ' b'] : w === ' ' || w === '\t' ? ['a', `${w} b`] : [`a${w} b`]
    expect(mismatches([...BMP, ' ', '\t'], cut, expected)).toEqual([])
    expect(cut('\u3000')).toEqual(['a\u3000 b'])
    expect(cut('\u200b')).toEqual(['a\u200b', ' b'])
  })

  it('cuts a run softly after a letter or digit before punctuation, never after whitespace', () => {
    const expected = (b: string) => !isSpace(b) && (isLetter(b) || isNumber(b))
    expect(mismatches(BMP, (b) => softCut(b, '.'), expected)).toEqual([])
    expect([softCut('Ω', '.'), softCut('٣', '.'), softCut('\u00a0', '.'), softCut('-', '.')]).toEqual([
      true,
      true,
      false,
      false,
    ])
  })

  it('cuts a run softly between a digit and anything but a digit, never after whitespace', () => {
    expect(
      mismatches(
        BMP,
        (b) => softCut(b, '1'),
        (b) => !isSpace(b) && !isNumber(b),
      ),
    ).toEqual([])
    expect(
      mismatches(
        BMP,
        (c) => softCut('7', c),
        (c) => !isNumber(c),
      ),
    ).toEqual([])
    expect([softCut('\u2028', '1'), softCut('²', '1'), softCut('7', 'Ⅻ'), softCut('7', 'x')]).toEqual([
      false,
      false,
      false,
      true,
    ])
  })

  it('cuts a run softly after a letter unless a letter, a mark or an apostrophe follows', () => {
    const expected = (c: string) => isNumber(c) || (!isLetterOrMark(c) && c !== "'")
    expect(mismatches(BMP, (c) => softCut('a', c), expected)).toEqual([])
    expect(mismatches(BMP, (c) => softCut('é', c), expected)).toEqual([])
    expect([softCut('a', "'"), softCut('a', '\u0301'), softCut('é', 'ß'), softCut('a', '3')]).toEqual([
      false,
      false,
      false,
      true,
    ])
  })
})

import { countTokens as referenceCount } from 'gpt-tokenizer/encoding/o200k_base'
import { describe, expect, it } from 'vitest'
import { countingPieces } from '../../../src/billing/tokens.ts'

// Where countingPieces cuts, and that its safe cuts keep the tokenizer's count exact (the bounds and
// the tally's batching: tokens-bounds, tokens-pieces, tokens-tally).

describe('countingPieces: where it cuts', () => {
  const pieces = (text: string, cap = 128, size = 1) => [...countingPieces(text, cap, size)]

  it('cuts before a space or tab that follows a non-space, never inside whitespace', () => {
    expect(pieces('aaaa bbbb cccc')).toEqual(['aaaa', ' bbbb', ' cccc'])
    expect(pieces('a  b')).toEqual(['a', '  b'])
    expect(pieces('a\tb')).toEqual(['a', '\tb'])
    expect(pieces('a\nb c')).toEqual(['a\nb', ' c'])
    expect(pieces('  a')).toEqual(['  a'])
    expect(pieces('')).toEqual([])
    expect(pieces('x')).toEqual(['x'])
  })

  it('keeps pieces of at least `size` characters together', () => {
    expect(pieces('aa bb cc dd', 128, 5)).toEqual(['aa bb', ' cc dd'])
    expect(pieces('aa bb cc dd', 128, 6)).toEqual(['aa bb cc', ' dd'])
    expect(pieces('aa bb cc dd', 128, 100)).toEqual(['aa bb cc dd'])
  })

  it('cuts a long run at the last split o200k always makes in its second half', () => {
    // Letters then digits, letters then punctuation: safe places. Cap 8: the run's first 8 characters
    // are searched back to the middle for one.
    expect(pieces('abcdef12345678', 8)).toEqual(['abcdef', '12345678'])
    expect(pieces('abcdefg.hijklmn', 8)).toEqual(['abcdefg', '.hijklmn'])
    // A contraction's apostrophe is no place to cut; the run is cut hard at the cap instead.
    expect(pieces("abcdefg'hijklmn", 8)).toEqual(["abcdefg'", 'hijklmn'])
    // Whitespace before a place: no cut there (\s+(?!\S) looks past it); before the newline there is.
    expect(pieces('abcdef\n.xyzuvw', 8)).toEqual(['abcdef', '\n.xyzuvw'])
  })

  it('cuts only where the counts of the pieces add up to the count of the whole', () => {
    const count = (t: string) => referenceCount(t, { disallowedSpecial: new Set<string>() })
    // Each text has a safe place in the second half of every run longer than the caps it is cut at
    // (with cap 8, 'naïve' after ':東京;' has none: that cut is hard, and may change the count).
    const texts: [string, number[]][] = [
      ['abcdef\n.xyzuvw', [8, 16]],
      ['abcdef12345678', [8, 16]],
      ['abcdefg.hijklmn', [8, 16]],
      ['ab.cd,ef(gh)ij;kl=12+34 mn[op]q7\n'.repeat(40), [8, 16]],
      ['x1y22z333w4444'.repeat(30), [8, 16]],
      ['naïve_café-Zürich/Ελλάδα:東京;'.repeat(30), [16]],
      ["it's won't they'd".repeat(20), [16]],
      ['a\u0301b\u0301c\u0301d.e\u0301f'.repeat(20), [8, 16]],
      ['\t\tab\t\tcd  ef\u00a0gh\u3000ij'.repeat(20), [8, 16]],
    ]
    for (const [text, caps] of texts) {
      for (const cap of caps) {
        const cut = pieces(text, cap)
        expect(cut.join('')).toBe(text)
        expect(cut.reduce((n, p) => n + count(p), 0)).toBe(count(text))
      }
    }
  })

  it('cuts hard at the cap when the second half has no safe place, never between a surrogate pair', () => {
    // A run is cut once it is longer than the cap: a piece may hold cap + 1 characters of one run.
    expect(pieces('abcdefghijklmnopq', 8)).toEqual(['abcdefgh', 'ijklmnopq'])
    expect(pieces('abcdefghijklmnopqr', 8)).toEqual(['abcdefgh', 'ijklmnop', 'qr'])
    const emoji = '😀😀😀😀😀😀'
    const cut = pieces(emoji, 5)
    expect(cut.join('')).toBe(emoji)
    for (const p of cut) expect(p.charCodeAt(0)).not.toSatisfy((c: number) => c >= 0xdc00 && c <= 0xdfff)
  })
})

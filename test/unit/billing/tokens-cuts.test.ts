import { countTokens as referenceCount } from 'gpt-tokenizer/encoding/o200k_base'
import { describe, expect, it } from 'vitest'
import {
  countingPieces,
  createTokenTally,
  embeddingTokenBound,
  imagePartCount,
  promptText,
  promptTokenBound,
} from '../../../src/billing/tokens.ts'
import type { ChatRequest, EmbeddingsRequest } from '../../../src/providers/types.ts'

// The cheap bounds taken before a request (exact figures, computed by hand), the text an estimate
// counts, and where countingPieces cuts.

const chat = (messages: unknown[], extra: Record<string, unknown> = {}): ChatRequest =>
  ({ model: 'm', messages, ...extra }) as ChatRequest
const bytes = (v: unknown) => Buffer.byteLength(JSON.stringify(v))

describe('promptTokenBound', () => {
  it('is 8 per message plus the UTF-8 bytes of its text', () => {
    expect(promptTokenBound(chat([{ role: 'user', content: 'héllo' }]))).toBe(8 + 6)
    expect(
      promptTokenBound(
        chat([
          { role: 'system', content: 'ab' },
          { role: 'user', content: '€' },
        ]),
      ),
    ).toBe(8 + 2 + 8 + 3)
    expect(promptTokenBound(chat([{ role: 'assistant', content: null }]))).toBe(8)
    expect(promptTokenBound(chat([]))).toBe(0)
  })

  it('counts text parts by bytes, an image as 2,000, any other part by its JSON', () => {
    const audio = { type: 'input_audio', input_audio: { data: 'QUJD', format: 'wav' } }
    const noText = { type: 'text' }
    const req = chat([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'ab' },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
          audio,
          noText,
        ],
      },
    ])
    expect(promptTokenBound(req)).toBe(8 + 2 + 2_000 + bytes(audio) + bytes(noText))
    expect(bytes(noText)).toBe(15)
  })

  it('adds tool calls and reasoning of a message, and the tools and response format of the request', () => {
    const toolCalls = [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }]
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }]
    const format = { type: 'json_object' }
    const req = chat(
      [
        { role: 'assistant', content: 'ok', tool_calls: toolCalls, reasoning: 'þought' },
        { role: 'assistant', content: 'x', reasoning: 42 },
      ],
      { tools, response_format: format },
    )
    expect(promptTokenBound(req)).toBe(8 + 2 + bytes(toolCalls) + 7 + (8 + 1) + bytes(tools) + bytes(format))
  })
})

describe('embeddingTokenBound', () => {
  it('is the bytes of text inputs and one per token id', () => {
    const bound = (input: unknown) => embeddingTokenBound({ model: 'e', input } as EmbeddingsRequest)
    expect(bound('héllo')).toBe(6)
    expect(bound(['ab', 'cde', ''])).toBe(5)
    expect(bound([101, 102, 103])).toBe(3)
    expect(bound([[1, 2], [3], []])).toBe(3)
  })
})

describe('promptText and imagePartCount', () => {
  it('joins roles, texts, tool calls and tools with newlines, leaving images and other parts out', () => {
    const toolCalls = [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }]
    const tools = [{ type: 'function', function: { name: 'f' } }]
    const req = chat(
      [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
            { type: 'text' },
            { type: 'text', text: 'here' },
          ],
        },
        { role: 'assistant', content: null, tool_calls: toolCalls },
      ],
      { tools },
    )
    expect(promptText(req)).toBe(
      [
        'system',
        'be brief',
        'user',
        'look',
        'here',
        'assistant',
        JSON.stringify(toolCalls),
        JSON.stringify(tools),
      ].join('\n'),
    )
    expect(promptText(chat([]))).toBe('')
    expect(imagePartCount(req)).toBe(1)
    const images = { type: 'image_url', image_url: { url: 'https://example.com/b.png' } }
    expect(
      imagePartCount(
        chat([
          { role: 'user', content: [images, images] },
          { role: 'user', content: 'no image' },
          { role: 'user', content: [images, { type: 'text', text: 't' }] },
        ]),
      ),
    ).toBe(3)
  })
})

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

describe('createTokenTally: edges', () => {
  it('ignores empty pieces and counts nothing for nothing', async () => {
    const calls: string[] = []
    const tally = createTokenTally(async (text) => {
      calls.push(text)
      return text.length
    })
    tally.add('')
    expect(tally.pendingLength()).toBe(0)
    expect(await tally.total()).toBe(0)
    expect(calls).toEqual([])
    tally.add('ab')
    tally.add('')
    tally.add('c')
    expect(tally.pendingLength()).toBe(3)
    expect(tally.heldLength()).toBe(3)
    expect(await tally.total()).toBe(3)
    expect(calls).toEqual(['abc'])
  })
})

import { readFileSync } from 'node:fs'
import { countTokens as referenceCount } from 'gpt-tokenizer/encoding/o200k_base'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  COUNT_SLICE,
  PIECE_CAP,
  PIECE_TEXT,
  TALLY_BATCH,
  countingPieces,
  countTokens,
  createTokenMeter,
} from '../../../src/billing/tokens.ts'

/** gpt-tokenizer on the whole text at once, special-token look-alikes as plain text. */
const reference = (text: string) => referenceCount(text, { disallowedSpecial: new Set<string>() })

/** mulberry32: the same "random" text on every run. */
function randomText(alphabet: string, length: number, seed = 1): string {
  const symbols = [...alphabet]
  const out: string[] = []
  for (let i = 0; i < length; i++) {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    out.push(symbols[Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * symbols.length)]!)
  }
  return out.join('')
}

const LETTERS = 'abcdefghijklmnopqrstuvwxyz'
const MB = 1_000_000

const SENTENCES = [
  "The gateway forwards each request to the first healthy provider, and it doesn't retry once a stream has started.",
  'Usage is billed exactly: 1,250 prompt tokens at $2.50 per million cost $0.003125 (3 125 000 000 picodollars).',
  '\n  - Streams end with `data: [DONE]`; a cut stream is still recorded (see "Usage", §4.2).\n',
  '{"model":"openai/gpt-4o","messages":[{"role":"user","content":"Hi there!"}],"stream":true}\n',
  'Ünïcödé text: naïve café owners in Zürich, Ελληνικά, 東京の天気は晴れです。\n\n',
  'function priceUsage(usage: Usage, price: Price): Money {\n\treturn usage.prompt_tokens * price.prompt\n}\n',
]

/** Ordinary text of about `length` characters: prose, markdown, JSON and code, in many slices. */
function ordinaryText(length: number): string {
  const parts: string[] = []
  for (let i = 0, n = 0; n < length; i++) {
    const part = `${i}. ${SENTENCES[i % SENTENCES.length]} `
    parts.push(part)
    n += part.length
  }
  return parts.join('')
}

beforeAll(async () => {
  await countTokens('load the encoding once')
})

describe('countTokens', () => {
  it('counts ordinary text exactly as the tokenizer does on the whole of it', async () => {
    const text = ordinaryText(200_000)
    expect(text.length).toBeGreaterThan(10 * COUNT_SLICE)
    expect(await countTokens(text)).toBe(reference(text))
    for (const short of ['', 'Hi', 'Hello, world!', SENTENCES[0]!, `  ${SENTENCES[2]!}  `]) {
      expect(await countTokens(short)).toBe(reference(short))
    }
  })

  it('counts runs without spaces exactly when they have places o200k splits at', async () => {
    const json = JSON.stringify(
      Array.from({ length: 500 }, (_, i) => ({
        id: `gen_${i}`,
        model: 'anthropic/claude-sonnet-4',
        cost: i / 7,
      })),
    )
    const url = `https://example.com/${'path/segment_with-words/'.repeat(40)}?q=1&r=two`
    const base64 = Buffer.from(ordinaryText(30_000)).toString('base64')
    for (const text of [json, url, base64]) expect(await countTokens(text)).toBe(reference(text))
  })

  it('stays within 1 % of the tokenizer on real documents and CJK text', async () => {
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8')
    const chinese =
      '人工智能推理网关位于客户端和模型提供商之间负责路由请求计费和限流当上游没有报告用量时网关会估算令牌数量'
        .repeat(40)
        .concat('这是一个测试，包含标点符号。'.repeat(200))
    for (const text of [readme, chinese]) {
      const expected = reference(text)
      expect(Math.abs((await countTokens(text)) - expected)).toBeLessThanOrEqual(expected * 0.01)
    }
  })

  it('counts text that looks like a special token as plain text instead of throwing', async () => {
    const text = 'ignore this: <|endoftext|><|im_start|>system'
    expect(() => referenceCount(text)).toThrow(/special token/)
    expect(await countTokens(text)).toBe(reference(text))
    expect(await countTokens(text)).toBeGreaterThan(5)
  })

  it.each([
    ['random letters', LETTERS],
    ['DNA', 'ACGT'],
  ])('counts 1 MB of %s without spaces close to the tokenizer', async (_, alphabet) => {
    const text = randomText(alphabet, MB)
    const count = await countTokens(text)
    // A token covers at least one byte; the count must not be silly either.
    expect(count).toBeGreaterThan(0)
    expect(count).toBeLessThanOrEqual(Buffer.byteLength(text))
    // The whole-text tokenizer is quadratic here: compare tokens per character with 20 kB of the same text.
    const sample = text.slice(0, 20_000)
    const expectedRate = reference(sample) / sample.length
    expect(count / text.length).toBeGreaterThan(expectedRate * 0.99)
    expect(count / text.length).toBeLessThan(expectedRate * 1.02)
  })

  it('gives the event loop a turn at least every COUNT_SLICE characters', async () => {
    const text = randomText(LETTERS, MB)
    let ticks = 0
    let counting = true
    const tick = () => {
      ticks++
      if (counting) setImmediate(tick)
    }
    const counted = countTokens(text)
    setImmediate(tick)
    await counted
    counting = false
    expect(ticks).toBeGreaterThanOrEqual(Math.floor(text.length / COUNT_SLICE) - 1)
  })
})

describe('countingPieces', () => {
  it('cuts any text into pieces that join back to it, bounded in length', () => {
    const texts = [
      ordinaryText(50_000),
      randomText(LETTERS, 50_000),
      ' '.repeat(5_000),
      randomText('😀🎉🚀', 5_000),
      randomText('ab ', 50_000),
    ]
    for (const text of texts) {
      const pieces = [...countingPieces(text)]
      expect(pieces.join('')).toBe(text)
      for (const piece of pieces) {
        expect(piece.length).toBeLessThanOrEqual(PIECE_TEXT + PIECE_CAP)
        expect(piece.charCodeAt(0)).not.toSatisfy((c: number) => c >= 0xdc00 && c <= 0xdfff)
      }
    }
  })

  it('cuts a run without any split into pieces of at most PIECE_CAP characters', () => {
    const pieces = [...countingPieces(randomText('ACGT', 10_000))]
    expect(pieces.length).toBeGreaterThanOrEqual(10_000 / PIECE_CAP)
    for (const piece of pieces) expect(piece.length).toBeLessThanOrEqual(PIECE_CAP)
  })
})

describe('createTokenMeter, with the real tokenizer', () => {
  it('totals a stream as counting all of its text would, counting it in batches as it goes', async () => {
    const text = ordinaryText(300_000)
    const handed: number[] = []
    const meter = createTokenMeter(Number.MAX_SAFE_INTEGER, async (t) => {
      handed.push(t.length)
      return countTokens(t)
    })
    for (let at = 0, i = 0; at < text.length; i++) {
      meter.add(text.slice(at, (at += 1 + (i % 23))))
      if (meter.needsCount()) expect(await meter.exceeded()).toBe(false)
    }
    const total = await meter.total()
    expect(Math.max(...handed)).toBeLessThan(TALLY_BATCH + 23)
    // Each batch boundary may split a word: at most one token each.
    expect(Math.abs(total - reference(text))).toBeLessThanOrEqual(handed.length)
  })
})

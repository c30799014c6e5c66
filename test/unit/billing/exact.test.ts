import { describe, expect, it } from 'vitest'
import { applyPpm, fromPpm, perUnit, toPpm, toUsd, usd, usdRounded } from '../../../src/billing/money.ts'
import { compilePrice, priceChatUsage, priceUsage } from '../../../src/billing/prices.ts'

// Exact picodollar figures for every part of a price, computed by hand, so a changed operator in the
// cost formula or the money code is noticed (npm run test:mutation measures it).

// Distinct prices (USD per million) so every term is told apart: per token they are 2e6, 3e6, … pico.
const table = {
  prompt: 2,
  cachedPrompt: 3,
  cacheWrite: 5,
  completion: 7,
  reasoning: 11,
  audioPrompt: 13,
  audioCompletion: 17,
}
const usage = {
  prompt_tokens: 1000,
  completion_tokens: 500,
  total_tokens: 1500,
  prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 20, audio_tokens: 30 },
  completion_tokens_details: { reasoning_tokens: 40, audio_tokens: 60 },
}

describe('chat usage cost, term by term', () => {
  const p = compilePrice(table)

  it('compiles each price to picodollars per token', () => {
    expect([
      p.prompt,
      p.cachedPrompt,
      p.cacheWrite,
      p.completion,
      p.reasoning,
      p.audioPrompt,
      p.audioCompletion,
    ]).toEqual([2_000_000n, 3_000_000n, 5_000_000n, 7_000_000n, 11_000_000n, 13_000_000n, 17_000_000n])
  })

  it('prices each part once: text in, cached, cache write, audio in, text out, reasoning, audio out', () => {
    // 850 text in × 2e6 + 100 × 3e6 + 20 × 5e6 + 30 × 13e6 + 400 text out × 7e6 + 40 × 11e6 + 60 × 17e6
    expect(priceChatUsage(usage, p)).toBe(6_750_000_000n)
  })

  it('each part alone costs exactly its own term', () => {
    const only = (
      pd: Record<string, number>,
      cd: Record<string, number>,
      prompt: number,
      completion: number,
    ) =>
      priceChatUsage(
        {
          prompt_tokens: prompt,
          completion_tokens: completion,
          total_tokens: prompt + completion,
          prompt_tokens_details: pd,
          completion_tokens_details: cd,
        },
        p,
      )
    expect(only({}, {}, 10, 0)).toBe(20_000_000n)
    expect(only({ cached_tokens: 10 }, {}, 10, 0)).toBe(30_000_000n)
    expect(only({ cache_write_tokens: 10 }, {}, 10, 0)).toBe(50_000_000n)
    expect(only({ audio_tokens: 10 }, {}, 10, 0)).toBe(130_000_000n)
    expect(only({}, {}, 0, 10)).toBe(70_000_000n)
    expect(only({}, { reasoning_tokens: 10 }, 0, 10)).toBe(110_000_000n)
    expect(only({}, { audio_tokens: 10 }, 0, 10)).toBe(170_000_000n)
  })

  it('never bills negative text when the details exceed the totals', () => {
    const odd = {
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 15,
      prompt_tokens_details: { cached_tokens: 30 },
      completion_tokens_details: { reasoning_tokens: 9 },
    }
    // 0 text in, 30 cached × 3e6; 0 text out, 9 reasoning × 11e6
    expect(priceChatUsage(odd, p)).toBe(90_000_000n + 99_000_000n)
  })

  it('ignores counts that are not positive finite numbers, and floors fractions', () => {
    const weird = (v: unknown) =>
      priceChatUsage({ prompt_tokens: v as number, completion_tokens: 0, total_tokens: 0 }, p)
    expect(weird(-5)).toBe(0n)
    expect(weird(0)).toBe(0n)
    expect(weird(Number.NaN)).toBe(0n)
    expect(weird(Number.POSITIVE_INFINITY)).toBe(0n)
    expect(weird('7')).toBe(0n)
    expect(weird(2.9)).toBe(4_000_000n)
    expect(weird(1)).toBe(2_000_000n)
  })

  it('falls back to the prompt and completion prices when the others are absent', () => {
    const plain = compilePrice({ prompt: 2, completion: 7 })
    expect([plain.cachedPrompt, plain.cacheWrite, plain.audioPrompt, plain.embedding]).toEqual([
      2_000_000n,
      2_000_000n,
      2_000_000n,
      2_000_000n,
    ])
    expect([plain.reasoning, plain.audioCompletion]).toEqual([7_000_000n, 7_000_000n])
    // 850 × 2 + 100 × 2 + 20 × 2 + 30 × 2 (all prompt) + 500 × 7 (all completion), × 1e6
    expect(priceChatUsage(usage, plain)).toBe((2_000n + 3_500n) * 1_000_000n)
    const none = compilePrice({})
    expect(priceChatUsage(usage, none)).toBe(0n)
    expect(compilePrice({ embedding: 0.1 }).prompt).toBe(100_000n)
  })
})

describe('other kinds of usage', () => {
  const p = compilePrice({
    embedding: 0.02,
    imageByTier: { '1K': 0.04, '2K': 0.08 },
    videoPerSecond: { '720P': 0.1, '1080P': 0.3 },
    speechPerMillionCharacters: 15,
    speechAudioTokens: 12,
  })

  it('embeddings per input token', () => {
    expect(priceUsage({ kind: 'embedding', promptTokens: 1000 }, p)).toBe(20_000_000n)
    expect(priceUsage({ kind: 'embedding', promptTokens: -1 }, p)).toBe(0n)
  })

  it('images by tier, an unknown tier at the dearest', () => {
    expect(priceUsage({ kind: 'images', count: 3, tier: '1K' }, p)).toBe(120_000_000_000n)
    expect(priceUsage({ kind: 'images', count: 2, tier: '2K' }, p)).toBe(160_000_000_000n)
    expect(priceUsage({ kind: 'images', count: 1, tier: '8K' }, p)).toBe(80_000_000_000n)
    expect(priceUsage({ kind: 'images', count: 1, tier: 'toString' }, p)).toBe(80_000_000_000n)
    expect(priceUsage({ kind: 'images', count: 0, tier: '1K' }, p)).toBe(0n)
    expect(priceUsage({ kind: 'images', count: 1, tier: '1K' }, compilePrice({}))).toBe(0n)
    // The dearest, wherever it is listed.
    const reversed = compilePrice({ imageByTier: { '2K': 0.08, '1K': 0.04 } })
    expect(priceUsage({ kind: 'images', count: 1, tier: '8K' }, reversed)).toBe(80_000_000_000n)
  })

  it('video per second started, by resolution', () => {
    expect(priceUsage({ kind: 'video', seconds: 4, resolution: '720P' }, p)).toBe(400_000_000_000n)
    expect(priceUsage({ kind: 'video', seconds: 4.2, resolution: '1080P' }, p)).toBe(1_500_000_000_000n)
    expect(priceUsage({ kind: 'video', seconds: 1, resolution: '4K' }, p)).toBe(300_000_000_000n)
    expect(priceUsage({ kind: 'video', seconds: 0, resolution: '720P' }, p)).toBe(0n)
    expect(priceUsage({ kind: 'video', seconds: -3, resolution: '720P' }, p)).toBe(0n)
  })

  it('speech per character and per audio token', () => {
    expect(priceUsage({ kind: 'speech', characters: 1000, audioTokens: 0 }, p)).toBe(15_000_000_000n)
    expect(priceUsage({ kind: 'speech', characters: 0, audioTokens: 1000 }, p)).toBe(12_000_000_000n)
    // Both prices, both charged.
    expect(priceUsage({ kind: 'speech', characters: 1000, audioTokens: 1000 }, p)).toBe(27_000_000_000n)
  })
})

describe('money at its edges', () => {
  it('parses only whole decimal amounts', () => {
    expect(usd('12')).toBe(12_000_000_000_000n)
    expect(usd(' 1.5 ')).toBe(1_500_000_000_000n)
    expect(usd('-2.25')).toBe(-2_250_000_000_000n)
    expect(usd(-0.5)).toBe(-500_000_000_000n)
    expect(usd('0.000000000001')).toBe(1n)
    expect(usd('123456789012.5')).toBe(123_456_789_012_500_000_000_000n)
    for (const bad of ['', '1.', '.5', 'x1', '1x', '1.5x', 'a1.5', '--1', '1e3', '1,5', '+1']) {
      expect(() => usd(bad), bad).toThrow(new RangeError(`not a decimal amount: ${bad}`))
    }
    expect(() => usd('0.0000000000001')).toThrow(/more than 12 decimals/)
    expect(() => usd(Number.POSITIVE_INFINITY)).toThrow(/finite/)
    expect(usd(1e-12)).toBe(1n)
    expect(usd(1e21)).toBe(1_000_000_000_000_000_000_000_000_000_000_000n)
  })

  it('formats picodollars as a USD number, negative ones too', () => {
    expect(toUsd(0n)).toBe(0)
    expect(toUsd(1n)).toBe(1e-12)
    expect(toUsd(-1n)).toBe(-1e-12)
    expect(toUsd(1_000_000_000_000n)).toBe(1)
    expect(toUsd(-1_500_000_000_000n)).toBe(-1.5)
    expect(toUsd(12_345_678_901_234n)).toBe(12.345678901234)
  })

  it('formats every amount as the number its decimal text is, on both sides of 2^53 picodollars', () => {
    // The reference: the decimal text of the amount, parsed by Number (correctly rounded).
    const reference = (m: bigint): number => {
      const abs = m < 0n ? -m : m
      const n = Number(
        `${abs / 1_000_000_000_000n}.${(abs % 1_000_000_000_000n).toString().padStart(12, '0')}`,
      )
      return m < 0n ? -n : n
    }
    const limit = BigInt(Number.MAX_SAFE_INTEGER)
    const amounts: bigint[] = [limit - 1n, limit, limit + 1n, limit + 2n, 10n ** 30n + 7n]
    let x = 12_345n
    for (let i = 0; i < 5_000; i++) {
      x = (x * 6_364_136_223_846_793_005n + 1_442_695_040_888_963_407n) % 2n ** 64n
      // Amounts of every size from 1 picodollar to about 10^7 USD.
      amounts.push(x % 10n ** BigInt(1 + (i % 19)))
    }
    for (const m of amounts) {
      expect(toUsd(m), String(m)).toBe(reference(m))
      expect(toUsd(-m), String(-m)).toBe(reference(-m))
    }
  })

  it('rounds a float amount to the picodollar, half away from zero', () => {
    expect(usdRounded(0.1 + 0.2)).toBe(300_000_000_000n)
    expect(usdRounded(2.9999999999999996)).toBe(3_000_000_000_000n)
    expect(usdRounded(1.0000000000005)).toBe(1_000_000_000_001n)
    expect(usdRounded(1.0000000000004)).toBe(1_000_000_000_000n)
    expect(usdRounded(4e-13)).toBe(0n)
    expect(usdRounded(5e-13)).toBe(1n)
    expect(usdRounded(-1.5e-12)).toBe(-2n)
    expect(usdRounded(12.5)).toBe(usd('12.5'))
    expect(usdRounded(1e9)).toBe(usd(1e9))
    expect(() => usdRounded(Number.POSITIVE_INFINITY)).toThrow(/finite/)
  })

  it('per-unit prices must be exact', () => {
    expect(perUnit(0)).toBe(0n)
    expect(perUnit(1)).toBe(1_000_000n)
    expect(perUnit(0.000001)).toBe(1n)
    expect(() => perUnit(0.0000015)).toThrow(/6 decimals/)
  })

  it('rates: between 0 and 1, at most 6 decimals; applied half up', () => {
    expect(toPpm(0)).toBe(0)
    expect(toPpm(1)).toBe(1_000_000)
    expect(toPpm(0.000001)).toBe(1)
    expect(() => toPpm(-0.1)).toThrow(/between 0 and 1/)
    expect(() => toPpm(1.000001)).toThrow(/between 0 and 1/)
    expect(() => toPpm(Number.NaN)).toThrow(/between 0 and 1/)
    expect(() => toPpm(0.0000001)).toThrow(/6 decimals/)
    expect(fromPpm(1)).toBe(0.000001)
    expect(applyPpm(1n, 500_000)).toBe(1n) // 0.5 rounds up
    expect(applyPpm(1n, 499_999)).toBe(0n)
    expect(applyPpm(999_999n, 1)).toBe(1n) // 0.999999 rounds up
    expect(applyPpm(1_000_000n, 1)).toBe(1n)
    expect(applyPpm(usd(10), 250_000)).toBe(usd('2.5'))
    expect(applyPpm(0n, 750_000)).toBe(0n)
  })
})

describe('the generation record as GET /v1/generation shows it', () => {
  it('turns money into USD numbers, the discount rate into a fraction, times into ISO', async () => {
    const { toGenerationBody } = await import('../../../src/schemas/generation.ts')
    const { generationFixture } = await import('../../contract/store.ts')
    const body = toGenerationBody(
      generationFixture('gen-1', 'acct', {
        upstreamCost: 4_000_000n,
        discount: 1_000_000n,
        cost: 3_000_000n,
        discountPpm: 250_000,
        attempts: [
          {
            provider: 'p',
            deployment: 'p#2',
            model: 'team/m',
            status: 503,
            outcome: 'upstream_error',
            startedAt: 0,
            durationMs: 7,
          },
        ],
      }),
    )
    expect(body).toMatchObject({
      api: '/v1/chat/completions',
      generationId: 'gen-1',
      model: 'mock/chat',
      provider: 'mock',
      createAt: '2023-11-14T22:13:20.000Z',
      generationTime: 120,
      latency: 40,
      streamed: true,
      finishReason: 'stop',
      cancelled: false,
      cost_source: 'upstream',
      attempts: [
        {
          provider: 'p',
          deployment: 'p#2',
          model: 'team/m',
          status: 503,
          outcome: 'upstream_error',
          startedAt: '1970-01-01T00:00:00.000Z',
          durationMs: 7,
        },
      ],
    })
    expect(body.usage).toMatchObject({
      prompt_tokens: 10,
      upstream_cost: 0.000004,
      discount: 0.000001,
      discount_percent: 0.25,
      cost: 0.000003,
    })
    expect(toGenerationBody(generationFixture('gen-2', 'acct')).attempts).toEqual([])
  })
})

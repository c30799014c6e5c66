import { describe, expect, it } from 'vitest'
import { applyPpm, toPpm, toUsd } from '../../../src/billing/money.ts'
import { compilePrice, priceChatUsage, priceEmbeddingUsage, priceUsage } from '../../../src/billing/prices.ts'

describe('priceChatUsage', () => {
  const gpt4o = compilePrice({ prompt: 2.5, cachedPrompt: 1.25, completion: 10 })

  it('prices plain tokens: 1 000 prompt + 500 completion on gpt-4o = $0.0075', () => {
    // 1000 × 2.5/1e6 + 500 × 10/1e6 = 0.0025 + 0.005
    const cost = priceChatUsage({ prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 }, gpt4o)
    expect(toUsd(cost)).toBe(0.0075)
  })

  it('prices cached prompt tokens at the cached price, once', () => {
    // 600 uncached × 2.5 + 400 cached × 1.25 + 100 × 10 = 1500 + 500 + 1000 = 3000 per million → $0.003
    const cost = priceChatUsage(
      {
        prompt_tokens: 1000,
        completion_tokens: 100,
        total_tokens: 1100,
        prompt_tokens_details: { cached_tokens: 400 },
      },
      gpt4o,
    )
    expect(toUsd(cost)).toBe(0.003)
  })

  it('prices reasoning at the completion price unless a reasoning price is set', () => {
    const usage = {
      prompt_tokens: 0,
      completion_tokens: 1000,
      total_tokens: 1000,
      completion_tokens_details: { reasoning_tokens: 800 },
    }
    expect(toUsd(priceChatUsage(usage, gpt4o))).toBe(0.01)
    const split = compilePrice({ prompt: 1, completion: 2, reasoning: 3 })
    // 200 × 2 + 800 × 3 = 2800 per million
    expect(toUsd(priceChatUsage(usage, split))).toBe(0.0028)
  })

  it('prices cache writes (Anthropic) at the cache-write price', () => {
    const sonnet = compilePrice({ prompt: 3, cachedPrompt: 0.3, cacheWrite: 3.75, completion: 15 })
    // 100 × 3 + 1000 × 0.3 + 2000 × 3.75 + 50 × 15 = 300 + 300 + 7500 + 750 = 8850 per million
    const cost = priceChatUsage(
      {
        prompt_tokens: 3100,
        completion_tokens: 50,
        total_tokens: 3150,
        prompt_tokens_details: { cached_tokens: 1000, cache_write_tokens: 2000 },
      },
      sonnet,
    )
    expect(toUsd(cost)).toBe(0.00885)
  })

  it('the discount example: 75 % off a $0.0075 upstream cost', () => {
    const upstream = priceChatUsage(
      { prompt_tokens: 1000, completion_tokens: 500, total_tokens: 1500 },
      gpt4o,
    )
    const discount = applyPpm(upstream, toPpm(0.75))
    expect(toUsd(discount)).toBe(0.005625)
    expect(toUsd(upstream - discount)).toBe(0.001875)
  })

  it('prices embeddings per input token', () => {
    const small = compilePrice({ embedding: 0.02 })
    expect(toUsd(priceEmbeddingUsage({ prompt_tokens: 1_000_000 }, small))).toBe(0.02)
    expect(priceEmbeddingUsage({ prompt_tokens: 1 }, small)).toBe(20_000n)
  })

  it('ignores negative or missing figures instead of paying them back', () => {
    expect(priceChatUsage({ prompt_tokens: -5, completion_tokens: 0, total_tokens: 0 }, gpt4o)).toBe(0n)
  })
})

describe('priceUsage: one pure function over every kind of billable usage', () => {
  const p = compilePrice({
    prompt: 2,
    completion: 8,
    embedding: 0.13,
    imageByTier: { '1K': 0.04, '2K': 0.08 },
    videoPerSecond: { '720P': 0.1, '1080P': 0.25 },
    speechPerMillionCharacters: 15,
    speechAudioTokens: 20,
  })

  it('tokens: the chat price (3 prompt × $2/M + 2 completion × $8/M = 22 µ$)', () => {
    const usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
    expect(priceUsage({ kind: 'tokens', usage }, p)).toBe(priceChatUsage(usage, p))
    expect(priceUsage({ kind: 'tokens', usage }, p)).toBe(22_000_000n)
  })

  it('embedding: input tokens at the embedding price (1 000 × $0.13/M = $0.00013)', () => {
    expect(toUsd(priceUsage({ kind: 'embedding', promptTokens: 1000 }, p))).toBe(0.00013)
  })

  it('images: count × the tier price; an unlisted tier at the dearest tier', () => {
    expect(toUsd(priceUsage({ kind: 'images', count: 3, tier: '1K' }, p))).toBe(0.12)
    expect(toUsd(priceUsage({ kind: 'images', count: 2, tier: '4K' }, p))).toBe(0.16)
    expect(priceUsage({ kind: 'images', count: 2, tier: '1K' }, compilePrice({}))).toBe(0n)
  })

  it('video: whole seconds started × the resolution price', () => {
    expect(toUsd(priceUsage({ kind: 'video', seconds: 8, resolution: '1080P' }, p))).toBe(2)
    expect(toUsd(priceUsage({ kind: 'video', seconds: 4.2, resolution: '720P' }, p))).toBe(0.5)
  })

  it('speech: characters and audio tokens, each at its price', () => {
    expect(toUsd(priceUsage({ kind: 'speech', characters: 1000, audioTokens: 0 }, p))).toBe(0.015)
    expect(toUsd(priceUsage({ kind: 'speech', characters: 0, audioTokens: 500 }, p))).toBe(0.01)
    expect(toUsd(priceUsage({ kind: 'speech', characters: 1000, audioTokens: 500 }, p))).toBe(0.025)
    // A model priced per character only bills the characters, whatever the audio came to.
    const perCharacter = compilePrice({ speechPerMillionCharacters: 15 })
    expect(toUsd(priceUsage({ kind: 'speech', characters: 1000, audioTokens: 500 }, perCharacter))).toBe(
      0.015,
    )
  })

  it('negative or non-finite counts cost nothing', () => {
    expect(priceUsage({ kind: 'images', count: -3, tier: '1K' }, p)).toBe(0n)
    expect(priceUsage({ kind: 'video', seconds: Number.NaN, resolution: '720P' }, p)).toBe(0n)
    // BigInt(Math.ceil(Infinity)) would throw: an upstream's absurd duration must not fail the settlement.
    expect(priceUsage({ kind: 'video', seconds: Infinity, resolution: '720P' }, p)).toBe(0n)
    expect(priceUsage({ kind: 'video', seconds: -2, resolution: '720P' }, p)).toBe(0n)
    expect(priceUsage({ kind: 'speech', characters: Infinity, audioTokens: Number.NaN }, p)).toBe(0n)
  })
})

import { describe, expect, it } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import {
  createMemoryGenerationStore,
  createMemoryLedgerStore,
  createMemoryRateLimitStore,
} from '../../../src/store/memory.ts'
import type { GenerationRecord } from '../../../src/store/types.ts'

describe('memory ledger', () => {
  it('reserves up to what is available and refuses when nothing is left', async () => {
    const l = createMemoryLedgerStore()
    await l.open('a', usd(1))
    const r1 = await l.reserve('a', 'g1', usd('0.6'), 0, 1000)
    expect(r1?.amount).toBe(usd('0.6'))
    // Only 0.4 is left: the next reservation is capped to it.
    const r2 = await l.reserve('a', 'g2', usd('0.6'), 0, 1000)
    expect(r2?.amount).toBe(usd('0.4'))
    expect(await l.reserve('a', 'g3', usd('0.01'), 0, 1000)).toBeNull()
    await l.settle(r1!, usd('0.1'))
    await l.release(r2!)
    expect(await l.credits('a', 0)).toEqual({ totalCredits: usd(1), totalUsage: usd('0.1'), reserved: 0n })
  })

  it('lets reservations expire so a crashed request does not hold credits forever', async () => {
    const l = createMemoryLedgerStore()
    await l.open('a', usd(1))
    await l.reserve('a', 'g1', usd(1), 0, 1000)
    expect(await l.reserve('a', 'g2', 1n, 999, 1000)).toBeNull()
    expect(await l.reserve('a', 'g2', 1n, 1000, 1000)).not.toBeNull()
  })

  it('open sets starting credits only once; addCredits adds', async () => {
    const l = createMemoryLedgerStore()
    await l.open('a', usd(5))
    await l.open('a', usd(50))
    await l.addCredits('a', usd('0.5'))
    expect((await l.credits('a', 0)).totalCredits).toBe(usd('5.5'))
  })
})

describe('memory rate limits', () => {
  it('counts within a window, refuses past the limit, and slides', async () => {
    const r = createMemoryRateLimitStore()
    const w = 60_000
    expect((await r.consume('k', 1, 2, w, 0)).allowed).toBe(true)
    expect((await r.consume('k', 1, 2, w, 1)).remaining).toBe(0)
    const refused = await r.consume('k', 1, 2, w, 2)
    expect(refused).toMatchObject({ allowed: false, limit: 2, remaining: 0, resetAt: w })
    // Half-way through the next window the previous one still weighs half: 2 × 0.5 = 1 used.
    expect((await r.consume('k', 1, 2, w, w + w / 2)).allowed).toBe(true)
    expect((await r.consume('k', 1, 2, w, w + w / 2)).allowed).toBe(false)
  })

  it('adjust corrects an estimate', async () => {
    const r = createMemoryRateLimitStore()
    await r.consume('t', 90, 100, 60_000, 0)
    await r.adjust('t', -80, 60_000, 0)
    expect((await r.consume('t', 85, 100, 60_000, 0)).allowed).toBe(true)
  })
})

describe('memory generations', () => {
  const record = (id: string, accountId = 'a'): GenerationRecord => ({
    generationId: id,
    accountId,
    api: '/v1/chat/completions',
    model: 'mock/chat',
    provider: 'mock',
    createdAt: 0,
    generationTimeMs: 1,
    latencyMs: 1,
    streamed: false,
    finishReason: 'stop',
    cancelled: false,
    costSource: 'upstream',
    usage: {
      prompt_tokens: 1,
      completion_tokens: 1,
      total_tokens: 2,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, image_tokens: 0, audio_tokens: 0 },
    },
    upstreamCost: 1n,
    discountPpm: 0,
    discount: 0n,
    cost: 1n,
  })

  it('pages an account’s records newest first', async () => {
    const g = createMemoryGenerationStore()
    for (const id of ['g1', 'g2', 'g3', 'g4', 'g5']) await g.put(record(id))
    await g.put(record('other', 'b'))
    const p1 = await g.listByAccount('a', { limit: 2 })
    expect(p1.data.map((r) => r.generationId)).toEqual(['g5', 'g4'])
    const p2 = await g.listByAccount('a', { limit: 2, before: p1.nextCursor! })
    expect(p2.data.map((r) => r.generationId)).toEqual(['g3', 'g2'])
    const p3 = await g.listByAccount('a', { limit: 2, before: p2.nextCursor! })
    expect(p3).toEqual({ data: [expect.objectContaining({ generationId: 'g1' })], nextCursor: null })
  })

  it('refuses a second record for the same generation', async () => {
    const g = createMemoryGenerationStore()
    await g.put(record('g1'))
    await expect(g.put(record('g1'))).rejects.toThrow(/already/)
  })
})

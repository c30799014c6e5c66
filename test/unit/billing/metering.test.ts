import { pino } from 'pino'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import {
  admit,
  buildRecord,
  costBound,
  createMeteringStats,
  release,
  settle,
} from '../../../src/billing/metering.ts'
import { compilePrice } from '../../../src/billing/prices.ts'
import { loadConfig } from '../../../src/config.ts'
import { beginGeneration, type GenerationDeps } from '../../../src/inference/generation.ts'
import { createRenewals } from '../../../src/inference/renewals.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import type { GenerationRecord } from '../../../src/domain/records.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import type { Deployment, ServedModel } from '../../../src/domain/models.ts'

const deployment = (provider: string, prompt: number, completion: number): Deployment => ({
  id: provider,
  slug: 'team/m',
  provider,
  upstreamModel: 'm',
  price: compilePrice({ prompt, completion }),
  priced: true,
  weight: 1,
})
const model: ServedModel = {
  slug: 'team/m',
  type: 'chat',
  strategy: 'priority',
  deployments: [deployment('cheap', 1, 2), deployment('dear', 10, 20)],
}
const account = accountFixture('acct', { discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} })

async function setup(credits = 1, ttlMs = 900_000) {
  const store = createMemoryStore()
  await store.accounts.create(account, usd(credits))
  const config = loadConfig({ NODE_ENV: 'test' })
  const log = pino({ level: 'silent' })
  const deps: GenerationDeps = {
    store,
    config: { ...config, limits: { ...config.limits, reservationTtlMs: ttlMs } },
    log,
    stats: createMeteringStats(),
    now: () => 1_000,
    renewals: createRenewals({ ledger: store.ledger, now: () => deps.now(), log, ttlMs }),
  }
  return { store, deps }
}

afterEach(() => vi.useRealTimers())

describe('costBound', () => {
  it('is the dearest deployment at its dearest prices', () => {
    // dear: 100 prompt × $10/M + 50 output × $20/M = 1000 + 1000 µ$ → 2e9 pico$
    expect(costBound(model.type, model.deployments, 100, 50)).toBe(2_000_000_000n)
  })
})

describe('admit', () => {
  it('reserves the discounted bound and refuses with 402 once nothing is left', async () => {
    const { store, deps } = await setup(0.0001)
    const base = { account, slug: model.slug, tokenEstimate: 10, ttlMs: 60_000, now: 1_000 }
    const a = await admit(deps, { ...base, generationId: 'g1', costBound: usd(0.00006) })
    expect(a.reservation.amount).toBe(usd(0.00006))
    // Only 0.00004 is left: the next hold is capped to it, the one after refused.
    const b = await admit(deps, { ...base, generationId: 'g2', costBound: usd(0.00006) })
    expect(b.reservation.amount).toBe(usd(0.00004))
    const refused = await admit(deps, { ...base, generationId: 'g3', costBound: 1n }).catch((e: unknown) => e)
    expect(refused).toMatchObject({ status: 402, code: 'insufficient_credits' })
    expect((await store.ledger.credits(account.id, 1_000)).reserved).toBe(usd(0.0001))
  })

  it('checks both per-minute limits in one step: a refused token limit does not spend a request', async () => {
    const { deps } = await setup()
    const limited = { ...account, rateLimits: { requestsPerMinute: 2, tokensPerMinute: 100 } }
    const base = { account: limited, slug: model.slug, costBound: 1n, ttlMs: 60_000, now: 1_000 }
    const err = await admit(deps, { ...base, generationId: 'g1', tokenEstimate: 101 }).catch(
      (e: unknown) => e,
    )
    expect(err).toMatchObject({ status: 429, code: 'rate_limit_exceeded' })
    expect((err as { message: string }).message).toMatch(/100 tokens per minute/)
    await admit(deps, { ...base, generationId: 'g2', tokenEstimate: 10 })
    const ok = await admit(deps, { ...base, generationId: 'g3', tokenEstimate: 10 })
    expect(ok.headers['x-ratelimit-remaining']).toBe('0')
    const third = await admit(deps, { ...base, generationId: 'g4', tokenEstimate: 1 }).catch(
      (e: unknown) => e,
    )
    expect(third).toMatchObject({ status: 429, headers: { 'retry-after': expect.any(String) } })
    expect((third as { message: string }).message).toMatch(/2 requests per minute/)
  })
})

describe('buildRecord', () => {
  it('prices the usage at the deployment that answered and applies the discount', () => {
    const usage = {
      prompt_tokens: 1000,
      completion_tokens: 100,
      total_tokens: 1100,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, image_tokens: 0, audio_tokens: 0 },
    }
    const r = buildRecord({
      generationId: 'g',
      accountId: 'a',
      api: '/v1/chat/completions',
      slug: model.slug,
      deployment: model.deployments[1] as Deployment,
      startedAt: 1_000,
      endedAt: 1_500,
      firstByteAt: 1_100,
      streamed: false,
      finishReason: 'stop',
      cancelled: false,
      costSource: 'upstream',
      usage,
      billable: { kind: 'tokens', usage },
      discountPpm: 250_000,
    })
    // 1000 × $10/M + 100 × $20/M = $0.012; 25 % off → $0.009
    expect(r).toMatchObject({
      provider: 'dear',
      upstreamCost: usd(0.012),
      discount: usd(0.003),
      cost: usd(0.009),
    })
    expect([r.generationTimeMs, r.latencyMs]).toEqual([500, 100])
  })
})

describe('settle', () => {
  it('retries a failing store, then charges once', async () => {
    const { store, deps } = await setup()
    const real = store.ledger.settle.bind(store.ledger)
    let calls = 0
    store.ledger.settle = async (r, rec) => {
      if (++calls < 3) throw new Error('database is down')
      return real(r, rec)
    }
    const record = generationFixture('g1', account.id, { cost: usd(0.5) })
    const ok = await settle(deps, {
      reservation: { id: 'g1', accountId: account.id },
      record,
      tokenEstimate: 0,
      now: 1_000,
    })
    expect(ok).not.toBeNull()
    expect(deps.stats).toMatchObject({ settleRetries: 2, settleFailures: 0 })
    expect((await store.ledger.credits(account.id, 1_000)).totalUsage).toBe(usd(0.5))
  })

  it('a store that never recovers is logged loudly with the record and counted, never thrown', async () => {
    const { store, deps } = await setup()
    const lines: string[] = []
    deps.log = pino({ level: 'error' }, { write: (s: string) => void lines.push(s) })
    store.ledger.settle = async () => {
      throw new Error('database is down')
    }
    vi.useFakeTimers()
    const pending = settle(deps, {
      reservation: { id: 'g1', accountId: account.id },
      record: generationFixture('g1', account.id, { cost: usd(0.5) }),
      tokenEstimate: 0,
      now: 1_000,
    })
    await vi.runAllTimersAsync()
    expect(await pending).toBeNull()
    expect(deps.stats.settleFailures).toBe(1)
    expect(lines.join('')).toMatch(/UNSETTLED GENERATION/)
    expect(lines.join('')).toContain('"cost":"500000000000"')
  })
})

describe('settle, retries and corrections', () => {
  const logged = (deps: GenerationDeps) => {
    const lines: Record<string, unknown>[] = []
    deps.log = pino({ level: 'warn' }, { write: (s: string) => void lines.push(JSON.parse(s)) })
    return lines
  }

  it('tries a failing store 4 times, 50, 200 then 800 ms apart, warning with each retry', async () => {
    const { store, deps } = await setup()
    const lines = logged(deps)
    let calls = 0
    store.ledger.settle = async () => {
      calls++
      throw new Error('database is down')
    }
    vi.useFakeTimers()
    let result: GenerationRecord | null | undefined
    void settle(deps, {
      reservation: { id: 'g1', accountId: account.id },
      record: generationFixture('g1', account.id),
      tokenEstimate: 0,
      now: 1_000,
    }).then((r) => (result = r))
    const seen: number[] = []
    for (const wait of [0, 49, 1, 199, 1, 799, 1]) {
      await vi.advanceTimersByTimeAsync(wait)
      seen.push(calls)
    }
    expect(seen).toEqual([1, 1, 2, 2, 3, 3, 4])
    expect(result).toBeNull()
    await vi.advanceTimersByTimeAsync(60_000)
    expect(calls).toBe(4)
    const retries = lines.filter((l) => l['msg'] === 'settlement failed; retrying')
    expect(retries.map((l) => [l['generationId'], l['attempt']])).toEqual([
      ['g1', 1],
      ['g1', 2],
      ['g1', 3],
    ])
    expect(retries.every((l) => (l['err'] as { message: string }).message === 'database is down')).toBe(true)
  })

  it('corrects the tokens-per-minute count by what was used beyond the estimate, and writes nothing when they match', async () => {
    const { store, deps } = await setup()
    const adjust = vi.spyOn(store.rateLimits, 'adjust')
    const base = { reservation: { id: 'g1', accountId: account.id }, now: 1_000 }
    const record = generationFixture('g1', account.id)
    const used = record.usage.total_tokens
    await settle(deps, { ...base, record, tokenEstimate: used })
    expect(adjust).not.toHaveBeenCalled()
    await settle(deps, {
      ...base,
      reservation: { id: 'g2', accountId: account.id },
      record: generationFixture('g2', account.id),
      tokenEstimate: used + 30,
    })
    expect(adjust.mock.calls).toEqual([[`tpm:${account.id}`, -30, 60_000, 1_000]])
  })
  it('makes the correction with the charge, not after it: both are asked before either answers', async () => {
    const { store, deps } = await setup()
    const asked: string[] = []
    let answer: () => void = () => undefined
    const answered = new Promise<void>((resolve) => (answer = resolve))
    const settleLedger = store.ledger.settle.bind(store.ledger)
    store.ledger.settle = async (...args) => {
      asked.push('settle')
      await answered
      return settleLedger(...args)
    }
    store.rateLimits.adjust = async () => {
      asked.push('adjust')
      await answered
    }
    const record = generationFixture('g1', account.id)
    const done = settle(deps, {
      reservation: { id: 'g1', accountId: account.id },
      record,
      tokenEstimate: record.usage.total_tokens + 30,
      tokenKeys: [`tpm:${account.id}`, 'ktpm:key'],
      now: 1_000,
    })
    // Nothing has answered yet: a correction made after the charge would not have been asked.
    await new Promise((resolve) => setImmediate(resolve))
    expect(asked.sort()).toEqual(['adjust', 'adjust', 'settle'])
    answer()
    expect((await done)?.generationId).toBe('g1')
  })
})

describe('the tokens-per-minute correction', () => {
  it('is counted only under a tokens-per-minute limit: without one, admission counts nothing and the end corrects nothing', async () => {
    const { store, deps } = await setup()
    const adjust = vi.spyOn(store.rateLimits, 'adjust')
    const base = { slug: model.slug, costBound: 1n, ttlMs: 60_000, now: 1_000, tokenEstimate: 40 }
    const free = await admit(deps, { ...base, account, generationId: 'g1' })
    expect(free.tokenEstimate).toBeNull()
    const limited = { ...account, rateLimits: { tokensPerMinute: 1_000 } }
    const counted = await admit(deps, { ...base, account: limited, generationId: 'g2' })
    expect(counted.tokenEstimate).toBe(40)

    const record = generationFixture('g1', account.id)
    await settle(deps, {
      reservation: free.reservation,
      record,
      tokenEstimate: free.tokenEstimate,
      now: 1_000,
    })
    await release(deps, { id: 'g3', accountId: account.id }, null, 1_000)
    expect(adjust).not.toHaveBeenCalled()
    await release(deps, counted.reservation, counted.tokenEstimate, 1_000)
    expect(adjust.mock.calls).toEqual([[`tpm:${account.id}`, -40, 60_000, 1_000]])
  })
})

describe('release', () => {
  const limited = { ...account, rateLimits: { tokensPerMinute: 100 } }
  const base = { account: limited, slug: model.slug, costBound: 1n, ttlMs: 60_000, now: 1_000 }

  it('frees the hold and gives the token estimate back to the per-minute limit', async () => {
    const { store, deps } = await setup()
    const a = await admit(deps, { ...base, generationId: 'g1', tokenEstimate: 60 })
    expect((await store.ledger.credits(account.id, 1_000)).reserved).toBe(1n)
    await release(deps, a.reservation, 60, 1_000)
    expect((await store.ledger.credits(account.id, 1_000)).reserved).toBe(0n)
    // 60 taken back: the whole 100 fits again, and not one token more.
    await admit(deps, { ...base, generationId: 'g2', tokenEstimate: 100 })
    const over = await admit(deps, { ...base, generationId: 'g3', tokenEstimate: 1 }).catch((e: unknown) => e)
    expect(over).toMatchObject({ status: 429 })
  })

  it('a store that fails to release or to correct the count is logged, never thrown', async () => {
    const { store, deps } = await setup()
    const lines: Record<string, unknown>[] = []
    deps.log = pino({ level: 'warn' }, { write: (s: string) => void lines.push(JSON.parse(s)) })
    store.ledger.release = async () => {
      throw new Error('ledger down')
    }
    store.rateLimits.adjust = async () => {
      throw new Error('limits down')
    }
    await expect(release(deps, { id: 'g9', accountId: account.id }, 5, 1_000)).resolves.toBeUndefined()
    // The two are made at once: their lines come in either order.
    const byMessage = new Map(lines.map((l) => [l['msg'], l]))
    expect(lines).toHaveLength(2)
    expect(byMessage.get('could not release a reservation')).toMatchObject({
      reservation: 'g9',
      err: { message: 'ledger down' },
    })
    expect(byMessage.get('could not correct the tokens-per-minute count')).toMatchObject({
      accountId: account.id,
      err: { message: 'limits down' },
    })
  })
})

describe('beginGeneration', () => {
  it('renews the reservation while the request runs, and stops when it ends', async () => {
    vi.useFakeTimers()
    const { store, deps } = await setup(1, 3_000)
    let t = 0
    deps.now = () => t
    const renew = vi.spyOn(store.ledger, 'renew')
    const gen = await beginGeneration(deps, {
      account,
      model,
      deployments: model.deployments,
      api: '/v1/chat/completions',
      generationId: 'g-long',
      streamed: true,
      promptTokenBound: 10,
      outputTokenBound: 10,
      tokenEstimate: 10,
    })
    // Ten TTLs pass: the hold is renewed every third of the TTL and never lapses.
    for (let i = 0; i < 30; i++) {
      t += 1_000
      await vi.advanceTimersByTimeAsync(1_000)
    }
    expect(renew.mock.calls.length).toBeGreaterThanOrEqual(29)
    expect((await store.ledger.credits(account.id, t)).reserved).toBeGreaterThan(0n)
    const record = await gen.finish({
      deployment: model.deployments[0] as Deployment,
      usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
    })
    expect(record).toMatchObject({ provider: 'cheap', costSource: 'upstream', generationTimeMs: 30_000 })
    const calls = renew.mock.calls.length
    await vi.advanceTimersByTimeAsync(10_000)
    expect(renew.mock.calls.length).toBe(calls)
    expect(deps.renewals.size()).toBe(0)
    expect((await store.ledger.credits(account.id, t)).reserved).toBe(0n)
  })

  it('a usage without completion_tokens is the upstream usage, not an estimate', async () => {
    const { deps } = await setup()
    const gen = await beginGeneration(deps, {
      account,
      model,
      deployments: model.deployments,
      api: '/v1/chat/completions',
      generationId: 'g-partial',
      streamed: true,
      promptTokenBound: 10,
      outputTokenBound: 10,
      tokenEstimate: 10,
    })
    const estimate = vi.fn(async () => ({ promptTokens: 99, completionTokens: 99 }))
    const record = await gen.finish({
      deployment: model.deployments[0] as Deployment,
      usage: { prompt_tokens: 7, total_tokens: 7 } as never,
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate,
    })
    expect(record).toMatchObject({
      costSource: 'upstream',
      usage: { prompt_tokens: 7, completion_tokens: 0 },
    })
    expect(estimate).not.toHaveBeenCalled()
  })

  it('a failing estimate still charges (bytes/4 of the prompt bound)', async () => {
    const { deps } = await setup()
    const gen = await beginGeneration(deps, {
      account,
      model,
      deployments: model.deployments,
      api: '/v1/chat/completions',
      generationId: 'g-est',
      streamed: true,
      promptTokenBound: 400,
      outputTokenBound: 10,
      tokenEstimate: 10,
    })
    const record = await gen.finish({
      deployment: model.deployments[0] as Deployment,
      produced: true,
      cancelled: true,
      finishReason: null,
      estimate: async () => {
        throw new RangeError('Invalid string length')
      },
    })
    expect(record).toMatchObject({ costSource: 'estimate', usage: { prompt_tokens: 100 } })
  })
})

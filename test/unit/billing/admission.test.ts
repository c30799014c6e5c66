import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import {
  admit,
  admitRequest,
  buildRecord,
  costBound,
  createMeteringStats,
  hasUsage,
  normalizeUsage,
  settle,
  type MeteringDeps,
} from '../../../src/billing/metering.ts'
import { usd } from '../../../src/billing/money.ts'
import { compilePrice } from '../../../src/billing/prices.ts'
import { loadConfig } from '../../../src/config.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import type { Store } from '../../../src/store/types.ts'
import type { Account } from '../../../src/domain/accounts.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import type { Deployment } from '../../../src/domain/models.ts'
import type { PriceTable } from '../../../src/domain/prices.ts'

// Admission and settlement at their boundaries, with exact figures.

const deployment = (id: string, table: PriceTable): Deployment => ({
  id,
  slug: 'team/m',
  provider: id,
  upstreamModel: 'm',
  price: compilePrice(table),
  priced: true,
  weight: 1,
})

async function setup(accounts: Account[], credits = 1) {
  const store = createMemoryStore()
  for (const a of accounts) await store.accounts.create(a, usd(credits))
  const deps: MeteringDeps = {
    store,
    config: loadConfig({ NODE_ENV: 'test' }),
    log: pino({ level: 'silent' }),
    stats: createMeteringStats(),
  }
  return { store, deps }
}

const plain = (id: string, over: Partial<Account> = {}) =>
  accountFixture(id, { discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {}, ...over })

describe('costBound', () => {
  it('takes the dearest deployment wherever it is listed', () => {
    const dear = deployment('dear', { prompt: 10, completion: 20 })
    const cheap = deployment('cheap', { prompt: 1, completion: 2 })
    // 100 × 10e6 + 50 × 20e6
    expect(costBound('chat', [dear, cheap], 100, 50)).toBe(2_000_000_000n)
    expect(costBound('chat', [cheap, dear], 100, 50)).toBe(2_000_000_000n)
    expect(costBound('chat', [], 100, 50)).toBe(0n)
  })

  it('takes each token at its dearest price: cache writes over prompts, reasoning over completions', () => {
    const d = deployment('d', { prompt: 1, cacheWrite: 5, cachedPrompt: 0.5, completion: 2, reasoning: 9 })
    // 100 × 5e6 + 50 × 9e6
    expect(costBound('chat', [d], 100, 50)).toBe(950_000_000n)
    const audio = deployment('a', { prompt: 1, audioPrompt: 3, completion: 2, audioCompletion: 4 })
    expect(costBound('chat', [audio], 100, 50)).toBe(300_000_000n + 200_000_000n)
  })

  it('bounds embeddings by their input price only', () => {
    const e = deployment('e', { embedding: 0.02, completion: 99 })
    expect(costBound('embedding', [e], 1000, 50)).toBe(20_000_000n)
  })
})

describe('admit', () => {
  const base = { slug: 'team/m', tokenEstimate: 10, ttlMs: 60_000, now: 1_000 }

  it('holds the bound minus the account’s discount', async () => {
    const acct = plain('disc', { discountPpm: 250_000 })
    const { deps } = await setup([acct])
    const a = await admit(deps, { ...base, account: acct, generationId: 'g1', costBound: 1_000_000n })
    expect(a.reservation.amount).toBe(750_000n)
    expect(a.discountPpm).toBe(250_000)
    const b = await admit(deps, {
      ...base,
      account: acct,
      generationId: 'g2',
      costBound: 1_000_000n,
      discountPpm: 100_000,
    })
    expect(b.reservation.amount).toBe(900_000n)
  })

  it('refuses with 402 and says why when nothing is left', async () => {
    const acct = plain('broke')
    const { deps } = await setup([acct], 0)
    const err = await admit(deps, { ...base, account: acct, generationId: 'g', costBound: 1n }).catch(
      (e: unknown) => e,
    )
    expect(err).toMatchObject({ status: 402, message: 'the account has no credits left' })
  })

  it('keeps each account’s token window apart', async () => {
    const limits = { tokensPerMinute: 100 }
    const a = plain('ta', { rateLimits: limits })
    const b = plain('tb', { rateLimits: limits })
    const { deps } = await setup([a, b])
    await admit(deps, { ...base, account: a, generationId: 'a1', costBound: 1n, tokenEstimate: 80 })
    const other = await admit(deps, {
      ...base,
      account: b,
      generationId: 'b1',
      costBound: 1n,
      tokenEstimate: 80,
    })
    expect(other.headers['x-ratelimit-remaining']).toBe('20')
  })

  it('admits exactly up to each limit and refuses one past it', async () => {
    const acct = plain('edge', { rateLimits: { requestsPerMinute: 3, tokensPerMinute: 30 } })
    const { deps } = await setup([acct])
    const go = (id: string, tokens: number) =>
      admit(deps, { ...base, account: acct, generationId: id, costBound: 1n, tokenEstimate: tokens }).then(
        (a) => a.headers['x-ratelimit-remaining'],
        (e: { status: number; headers: Record<string, string> }) =>
          `${e.status} ${e.headers['x-ratelimit-scope']}`,
      )
    expect(await go('1', 10)).toBe('2')
    expect(await go('2', 20)).toBe('1')
    // Tokens: 30 of 30 used; one more token is past the limit.
    expect(await go('3', 1)).toBe('429 account-tokens')
    expect(await go('4', 0)).toBe('0')
    expect(await go('5', 0)).toBe('429 account-requests')
  })

  it('says when the window resets, in whole seconds, and when to retry', async () => {
    const acct = plain('reset', { rateLimits: { requestsPerMinute: 1 } })
    const { deps } = await setup([acct])
    // The one-minute window runs from 0 to 60 000; at 1 000 it resets in 59 s.
    const first = await admit(deps, { ...base, account: acct, generationId: 'r1', costBound: 1n })
    expect(first.headers).toEqual({
      'x-ratelimit-limit': '1',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': expect.any(String),
    })
    expect(first.headers['x-ratelimit-reset']).toBe('59')
    const refused = (await admit(deps, {
      ...base,
      account: acct,
      generationId: 'r2',
      costBound: 1n,
      now: 30_500,
    }).catch((e: unknown) => e)) as { headers: Record<string, string> }
    // 29.5 s left: both round up.
    expect(refused.headers['retry-after']).toBe('30')
    expect(refused.headers['x-ratelimit-reset']).toBe('30')
  })
})

describe('settle', () => {
  it('corrects the token window by the actual usage minus the estimate', async () => {
    const acct = plain('adj', { rateLimits: { tokensPerMinute: 150 } })
    const { store, deps } = await setup([acct])
    const now = 1_000
    const a = await admit(deps, {
      account: acct,
      slug: 'team/m',
      generationId: 'g1',
      costBound: 1n,
      tokenEstimate: 100,
      ttlMs: 60_000,
      now,
    })
    const record = generationFixture('g1', acct.id, { cost: 1n })
    // The fixture's usage totals 15 tokens: the window goes from 100 to 15.
    expect(await settle(deps, { reservation: a.reservation, record, tokenEstimate: 100, now })).toEqual(
      record,
    )
    const next = await admit(deps, {
      account: acct,
      slug: 'team/m',
      generationId: 'g2',
      costBound: 1n,
      tokenEstimate: 130,
      ttlMs: 60_000,
      now,
    })
    expect(next.headers).toBeDefined()
    const { decisions } = await store.rateLimits.consume(
      [{ key: `tpm:${acct.id}`, amount: 0, limit: 150 }],
      60_000,
      now,
    )
    expect(decisions[0]?.remaining).toBe(150 - 15 - 130)
  })
})

describe('usage normalisation', () => {
  it('keeps non-negative whole counts, recomputes the total, fills every detail', () => {
    expect(
      normalizeUsage({
        prompt_tokens: 10.7,
        completion_tokens: 5,
        total_tokens: 999,
        prompt_tokens_details: { cached_tokens: -3, audio_tokens: Number.NaN },
        completion_tokens_details: { reasoning_tokens: 2, audio_tokens: '4' as unknown as number },
      }),
    ).toEqual({
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 15,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 2, image_tokens: 0, audio_tokens: 0 },
    })
    expect(
      normalizeUsage({ prompt_tokens: 0, completion_tokens: Number.POSITIVE_INFINITY, total_tokens: 0 })
        .total_tokens,
    ).toBe(0)
  })

  it('has a usage only when some tokens were counted', () => {
    expect(hasUsage(undefined)).toBe(false)
    expect(hasUsage({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 })).toBe(false)
    expect(hasUsage({ prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 })).toBe(true)
    expect(hasUsage({ prompt_tokens: 0, completion_tokens: 1, total_tokens: 1 })).toBe(true)
    expect(hasUsage({ prompt_tokens: -5, completion_tokens: 0, total_tokens: 0 })).toBe(false)
  })
})

describe('buildRecord attempts', () => {
  const input = {
    generationId: 'g',
    accountId: 'a',
    api: '/v1/chat/completions',
    slug: 'team/m',
    deployment: deployment('d', { prompt: 1 }),
    startedAt: 1_000,
    endedAt: 1_500,
    firstByteAt: undefined,
    streamed: false,
    finishReason: 'stop',
    cancelled: false,
    costSource: 'upstream' as const,
    usage: normalizeUsage({ prompt_tokens: 3, completion_tokens: 0, total_tokens: 3 }),
    billable: { kind: 'embedding' as const, promptTokens: 3 },
    discountPpm: 0,
  }

  it('lists the attempts when there were some, and no field otherwise', () => {
    const attempt = {
      provider: 'd',
      deployment: 'd',
      model: 'team/m',
      status: 200,
      outcome: 'ok',
      startedAt: 1_000,
      durationMs: 5,
    }
    expect(buildRecord({ ...input, attempts: [attempt] }).attempts).toEqual([attempt])
    expect(buildRecord({ ...input, attempts: [] })).not.toHaveProperty('attempts')
    expect(buildRecord(input)).not.toHaveProperty('attempts')
    // No first byte: latency is the whole time; 3 tokens at $1/M.
    expect(buildRecord(input)).toMatchObject({
      latencyMs: 500,
      generationTimeMs: 500,
      upstreamCost: 3_000_000n,
    })
  })
})

describe('admission store calls', () => {
  /** The store, counting each call made through it ("ns.method"). */
  const counted = (store: Store): { store: Store; calls: string[] } => {
    const calls: string[] = []
    const wrap = <T extends object>(ns: string, target: T): T =>
      new Proxy(target, {
        get(t, name) {
          const v = (t as Record<string | symbol, unknown>)[name]
          if (typeof v !== 'function') return v
          return (...args: unknown[]) => {
            calls.push(`${ns}.${String(name)}`)
            return (v as (...a: unknown[]) => unknown).apply(t, args)
          }
        },
      })
    const namespaces = ['accounts', 'ledger', 'rateLimits', 'admission', 'generations'] as const
    const wrapped = { ...store }
    for (const ns of namespaces) Object.assign(wrapped, { [ns]: wrap(ns, store[ns]) })
    return { store: wrapped, calls }
  }

  it('each step is one store call, limits and credits together', async () => {
    const acct = plain('one-call', { rateLimits: { requestsPerMinute: 5, tokensPerMinute: 1000 } })
    const { deps } = await setup([acct])
    const { store, calls } = counted(deps.store)
    const d = { ...deps, store }
    const before = await admitRequest(d, acct, 0)
    expect(before.headers['x-ratelimit-remaining']).toBe('4')
    expect(calls).toEqual(['admission.beforeBody'])
    calls.length = 0
    const a = await admit(d, {
      account: acct,
      slug: 'team/m',
      generationId: 'g1',
      costBound: usd(1),
      tokenEstimate: 10,
      ttlMs: 60_000,
      now: 0,
      requestCounted: true,
    })
    expect(a.reservation.amount).toBe(usd(1))
    expect(calls).toEqual(['admission.reserve'])
  })

  it('before the body, an account with nothing left is refused in that one call, and still counted', async () => {
    const acct = plain('broke', { rateLimits: { requestsPerMinute: 2 } })
    const { deps } = await setup([acct], 0)
    const { store, calls } = counted(deps.store)
    await expect(admitRequest({ ...deps, store }, acct, 0)).rejects.toMatchObject({ status: 402 })
    expect(calls).toEqual(['admission.beforeBody'])
    await expect(admitRequest({ ...deps, store }, acct, 1)).rejects.toMatchObject({ status: 402 })
    await expect(admitRequest({ ...deps, store }, acct, 2)).rejects.toMatchObject({ status: 429 })
  })
})

import { pino } from 'pino'
import { describe, expect, it, vi } from 'vitest'
import { createMeteringStats } from '../../../src/billing/metering.ts'
import { usd } from '../../../src/billing/money.ts'
import { compilePrice } from '../../../src/billing/prices.ts'
import { loadConfig } from '../../../src/config.ts'
import { beginGeneration, type GenerationDeps, type Outcome } from '../../../src/inference/generation.ts'
import { createRenewals } from '../../../src/inference/renewals.ts'
import { createMetrics } from '../../../src/metrics.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import type { Account } from '../../../src/domain/accounts.ts'
import { accountFixture } from '../../contract/store.ts'
import type { Deployment, ServedModel } from '../../../src/domain/models.ts'
import type { PriceTable } from '../../../src/domain/prices.ts'

// One generation's life with exact figures: what is held, what is charged and recorded, what is
// counted in the metrics, and what happens when settling fails.

const deployment = (slug: string, table: PriceTable, id = 'p'): Deployment => ({
  id,
  slug,
  provider: id,
  upstreamModel: 'm',
  price: compilePrice(table),
  priced: true,
  weight: 1,
})
const chatModel = (slug: string, d: Deployment[]): ServedModel => ({
  slug,
  type: 'chat',
  strategy: 'priority',
  deployments: d,
})

async function setup(account: Account, credits = 1) {
  const store = createMemoryStore()
  await store.accounts.create(account, usd(credits))
  const log = pino({ level: 'silent' })
  let t = 1_000
  const metrics = createMetrics()
  const deps: GenerationDeps = {
    store,
    config: loadConfig({ NODE_ENV: 'test' }),
    log,
    stats: createMeteringStats(),
    now: () => t,
    renewals: createRenewals({ ledger: store.ledger, now: () => t, log, ttlMs: 900_000 }),
    metrics,
  }
  const value = async (name: string, labels: Record<string, string> = {}) => {
    const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name)
    const v = m?.values.find((x) => Object.entries(labels).every(([k, l]) => x.labels[k] === l))
    return v?.value
  }
  return { store, deps, value, advance: (ms: number) => void (t += ms) }
}

const plain = (id: string, over: Partial<Account> = {}) =>
  accountFixture(id, { discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {}, ...over })
const usage = { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 }

describe('beginGeneration', () => {
  const d = deployment('team/m', { prompt: 1, completion: 2 })
  const model = chatModel('team/m', [d])
  const begin = (deps: GenerationDeps, account: Account, over: object = {}) =>
    beginGeneration(deps, {
      account,
      model,
      deployments: [d],
      api: '/v1/chat/completions',
      generationId: 'g1',
      streamed: false,
      promptTokenBound: 100,
      outputTokenBound: 10,
      tokenEstimate: 10,
      ...over,
    })
  /** An answer with the upstream's usage: what most tests finish with. */
  const answered = (over: Partial<Outcome> = {}): Outcome => ({
    deployment: d,
    usage,
    produced: true,
    cancelled: false,
    finishReason: 'stop',
    estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
    ...over,
  })

  it('releases the hold and records nothing when no upstream produced anything', async () => {
    const acct = plain('none')
    const { store, deps, value } = await setup(acct)
    const gen = await begin(deps, acct)
    // 100 × 1e6 + 10 × 2e6 held, counted in the gauge.
    expect((await store.ledger.credits(acct.id, 1_000)).reserved).toBe(120_000_000n)
    expect(await value('junction_reserved_credits_usd')).toBeCloseTo(0.00012, 12)
    const estimate = vi.fn(async () => ({ promptTokens: 1, completionTokens: 1 }))
    expect(
      await gen.finish({ deployment: d, produced: false, cancelled: false, finishReason: null, estimate }),
    ).toBeNull()
    expect(estimate).not.toHaveBeenCalled()
    expect(await store.ledger.credits(acct.id, 1_000)).toMatchObject({ reserved: 0n, totalUsage: 0n })
    expect(await store.generations.get('g1')).toBeNull()
    expect(await value('junction_reserved_credits_usd')).toBe(0)
  })

  it('bills a client that left before any output by the estimate of its prompt', async () => {
    const acct = plain('gone')
    const { store, deps } = await setup(acct)
    const gen = await begin(deps, acct)
    const r = await gen.finish({
      deployment: d,
      produced: false,
      cancelled: true,
      finishReason: null,
      estimate: async () => ({ promptTokens: 40, completionTokens: 3 }),
    })
    expect(r).toMatchObject({
      costSource: 'estimate',
      cancelled: true,
      usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 },
      upstreamCost: 46_000_000n,
    })
    expect((await store.ledger.credits(acct.id, 1_000)).totalUsage).toBe(46_000_000n)
  })

  it('records the attempts, the first byte it was told of, and counts tokens, cost and TTFB', async () => {
    const acct = plain('metered')
    const { deps, value, advance } = await setup(acct)
    const onRecord = vi.fn()
    const gen = await begin(deps, acct, { onRecord })
    const attempt = {
      provider: 'p',
      deployment: 'p',
      model: 'team/m',
      status: 200,
      outcome: 'ok',
      startedAt: 1_000,
      durationMs: 5,
    }
    gen.attempted(attempt)
    expect(gen.attempts).toEqual([attempt])
    gen.firstByte(1_250)
    gen.firstByte(1_900)
    advance(500)
    gen.firstByte()
    const r = await gen.finish(answered())
    expect(r).toMatchObject({
      latencyMs: 250,
      generationTimeMs: 500,
      attempts: [attempt],
      upstreamCost: 120_000_000n,
    })
    expect(onRecord).toHaveBeenCalledExactlyOnceWith(r)
    // A second finish changes nothing and returns the first record.
    expect(
      await gen.finish({
        deployment: d,
        produced: false,
        cancelled: false,
        finishReason: null,
        estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
      }),
    ).toBe(r)
    expect(onRecord).toHaveBeenCalledOnce()
    expect(await value('junction_tokens_total', { model: 'team/m', kind: 'prompt' })).toBe(100)
    expect(await value('junction_tokens_total', { model: 'team/m', kind: 'completion' })).toBe(10)
    expect(await value('junction_cost_usd_total', { model: 'team/m' })).toBeCloseTo(0.00012, 12)
    const ttfb = (await (deps.metrics as NonNullable<typeof deps.metrics>).registry.getMetricsAsJSON()).find(
      (m) => m.name === 'junction_time_to_first_byte_seconds',
    )
    const sum = ttfb?.values.find(
      (v) => (v as { metricName?: string }).metricName === 'junction_time_to_first_byte_seconds_sum',
    )
    expect(sum).toMatchObject({ value: 0.25, labels: { model: 'team/m', provider: 'p' } })
    expect(await value('junction_reserved_credits_usd')).toBe(0)
  })

  it('prices embeddings at the embedding price, not the prompt price', async () => {
    const acct = plain('emb')
    const { deps } = await setup(acct)
    const e = deployment('team/e', { prompt: 1, embedding: 3 })
    const gen = await beginGeneration(deps, {
      account: acct,
      model: { slug: 'team/e', type: 'embedding', strategy: 'priority', deployments: [e] },
      deployments: [e],
      api: '/v1/embeddings',
      generationId: 'ge',
      streamed: false,
      promptTokenBound: 10,
      outputTokenBound: 0,
      tokenEstimate: 3,
    })
    const r = await gen.finish({
      deployment: e,
      usage: { prompt_tokens: 10, completion_tokens: 0, total_tokens: 10 },
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
    })
    expect(r?.upstreamCost).toBe(30_000_000n)
  })

  it('holds at the smallest discount of the models that may answer, and charges the answering one’s', async () => {
    const acct = plain('disc', { discountPpm: 500_000, modelDiscountsPpm: { 'team/fallback': 100_000 } })
    const { store, deps } = await setup(acct)
    const fb = deployment('team/fallback', { prompt: 1, completion: 2 }, 'q')
    const gen = await begin(deps, acct, { deployments: [d, fb] })
    // Bound 120e6, 10 % off (the fallback's discount is the smallest).
    expect((await store.ledger.credits(acct.id, 1_000)).reserved).toBe(108_000_000n)
    const r = await gen.finish({
      deployment: fb,
      usage,
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
    })
    expect(r).toMatchObject({
      model: 'team/fallback',
      provider: 'q',
      discountPpm: 100_000,
      cost: 108_000_000n,
    })
  })

  it('withholds an answer whose charge could not be committed', async () => {
    const acct = plain('down')
    const { store, deps } = await setup(acct)
    const gen = await begin(deps, acct)
    vi.spyOn(store.ledger, 'settle').mockRejectedValue(new Error('database gone'))
    const err = await gen.finishBeforeDelivery(answered()).catch((e: unknown) => e)
    expect(err).toMatchObject({
      status: 503,
      code: 'store_unavailable',
      message: 'the answer could not be billed, so it was not delivered; retry',
    })
    expect(deps.stats.settleFailures).toBe(1)
  })

  it('delivers when the charge was committed', async () => {
    const acct = plain('up')
    const { deps } = await setup(acct)
    const gen = await begin(deps, acct)
    const r = await gen.finishBeforeDelivery(answered())
    expect(r?.cost).toBe(120_000_000n)
  })

  it('records the upstream usage as such, field by field', async () => {
    const acct = plain('fields')
    const { store, deps, advance } = await setup(acct)
    const gen = await begin(deps, acct, { streamed: true, api: '/v1/responses' })
    advance(40)
    gen.firstByte()
    gen.firstByte(1_010)
    advance(60)
    const r = await gen.finish(answered({ finishReason: 'length' }))
    const zeroDetails = {
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, image_tokens: 0, audio_tokens: 0 },
    }
    expect(r).toEqual({
      generationId: 'g1',
      accountId: acct.id,
      api: '/v1/responses',
      model: 'team/m',
      provider: 'p',
      createdAt: 1_000,
      generationTimeMs: 100,
      latencyMs: 40,
      streamed: true,
      finishReason: 'length',
      cancelled: false,
      costSource: 'upstream',
      usage: { ...usage, ...zeroDetails },
      upstreamCost: 120_000_000n,
      discountPpm: 0,
      discount: 0n,
      cost: 120_000_000n,
    })
    expect(await store.generations.get('g1')).toEqual(r)
  })

  it('estimates when the upstream reported no tokens at all', async () => {
    const acct = plain('zero')
    const { deps } = await setup(acct)
    const gen = await begin(deps, acct)
    const r = await gen.finish({
      deployment: d,
      usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: async () => ({ promptTokens: 7, completionTokens: 5 }),
    })
    expect(r).toMatchObject({
      costSource: 'estimate',
      usage: { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12 },
      upstreamCost: 17_000_000n,
    })
  })

  it('bills a quarter of the prompt bound, rounded up, when the estimate fails, and logs why', async () => {
    const acct = plain('quarter')
    const { store, deps } = await setup(acct)
    const error = vi.spyOn(deps.log, 'error')
    const gen = await begin(deps, acct, { promptTokenBound: 101 })
    const failure = new Error('tokenizer gone')
    const r = await gen.finish({
      deployment: d,
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: async () => {
        throw failure
      },
    })
    expect(r).toMatchObject({
      costSource: 'estimate',
      usage: { prompt_tokens: 26, completion_tokens: 0, total_tokens: 26 },
      upstreamCost: 26_000_000n,
    })
    expect((await store.ledger.credits(acct.id, 1_000)).totalUsage).toBe(26_000_000n)
    expect(error).toHaveBeenCalledExactlyOnceWith(
      { err: failure, generationId: 'g1' },
      'token estimate failed; billing bytes/4',
    )
  })

  it('delivers nothing-produced as null: there was no charge to commit', async () => {
    const acct = plain('empty')
    const { deps } = await setup(acct)
    const gen = await begin(deps, acct)
    const outcome = { deployment: d, produced: false, cancelled: false, finishReason: null }
    expect(
      await gen.finishBeforeDelivery({
        ...outcome,
        estimate: async () => ({ promptTokens: 1, completionTokens: 1 }),
      }),
    ).toBeNull()
  })

  it('settles to null, logs, and withholds the answer when recording itself fails', async () => {
    const acct = plain('broken')
    const { store, deps, value } = await setup(acct)
    const error = vi.spyOn(deps.log, 'error')
    const onRecord = vi.fn()
    const stops: ReturnType<typeof vi.fn>[] = []
    const renewals = deps.renewals
    deps.renewals = {
      ...renewals,
      hold: (r) => {
        const stop = vi.fn(renewals.hold(r))
        stops.push(stop)
        return stop
      },
    }
    const gen = await begin(deps, acct, { onRecord })
    const failure = new Error('estimate threw instead of rejecting')
    const outcome = {
      deployment: d,
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate: (): Promise<{ promptTokens: number; completionTokens: number }> => {
        throw failure
      },
    }
    const err = await gen.finishBeforeDelivery(outcome).catch((e: unknown) => e)
    expect(err).toMatchObject({ status: 503, code: 'store_unavailable' })
    expect(await gen.finish(outcome)).toBeNull()
    expect(onRecord).toHaveBeenCalledExactlyOnceWith(null)
    expect(error).toHaveBeenCalledExactlyOnceWith(
      { err: failure, generationId: 'g1' },
      'could not record or settle a generation',
    )
    expect(stops).toHaveLength(1)
    expect(stops[0]).toHaveBeenCalled()
    expect(await value('junction_reserved_credits_usd')).toBe(0)
    expect(await store.generations.get('g1')).toBeNull()
  })

  it('runs without metrics', async () => {
    const acct = plain('quiet')
    const { deps } = await setup(acct)
    delete deps.metrics
    const gen = await begin(deps, acct)
    const r = await gen.finish(answered())
    expect(r?.cost).toBe(120_000_000n)
    const none = await begin(deps, acct, { generationId: 'g2' })
    expect(
      await none.finish({
        deployment: d,
        produced: false,
        cancelled: false,
        finishReason: null,
        estimate: async () => ({ promptTokens: 0, completionTokens: 0 }),
      }),
    ).toBeNull()
  })
})

import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../../src/config.ts'
import type { RoutingConfig } from '../../../src/routing/config.ts'
import { GatewayError, UpstreamError } from '../../../src/errors.ts'
import { backoffMs, retryAfterMs, tryCandidates } from '../../../src/inference/attempts.ts'
import type { Generation, Outcome } from '../../../src/inference/generation.ts'
import { createHealth } from '../../../src/routing/health.ts'
import type { Candidate } from '../../../src/routing/router.ts'
import type { AttemptRecord } from '../../../src/domain/records.ts'

const base = loadConfig({ NODE_ENV: 'test' }).routing

function candidate(id: string, attemptsPerDeployment = 2): Candidate {
  return {
    key: `m|${id}`,
    model: { slug: 'team/m', type: 'chat', strategy: 'priority', deployments: [] },
    deployment: {
      id,
      slug: 'team/m',
      provider: id,
      upstreamModel: id,
      price: {} as never,
      priced: true,
      weight: 1,
    },
    provider: {
      config: { name: id, retry: { attemptsPerDeployment, backoffMs: 100, maxBackoffMs: 1_000 } },
    } as never,
  }
}

const fault = (provider: string, status: number | null, headers: Record<string, string> = {}) =>
  status === 429
    ? new UpstreamError('rate_limit_exceeded', 'limited', {
        provider,
        upstreamStatus: 429,
        headers,
        retryable: true,
      })
    : status === 400
      ? new UpstreamError('upstream_invalid_request', 'bad', { provider, upstreamStatus: 400 })
      : new UpstreamError(status === null ? 'upstream_timeout' : 'upstream_error', 'down', {
          provider,
          upstreamStatus: status,
          retryable: true,
        })

/** Runs tryCandidates with a fake clock: sleeping advances it. `script` gives each call's result. */
async function run(
  candidates: Candidate[],
  script: (id: string, n: number) => Error | 'ok',
  routing: Partial<RoutingConfig> = {},
  signal: AbortSignal = new AbortController().signal,
) {
  let t = 0
  const now = () => t
  const cfg = { ...base, ...routing }
  const health = createHealth(cfg, now)
  const attempts: AttemptRecord[] = []
  const finished: Outcome[] = []
  const sleeps: number[] = []
  const calls: string[] = []
  const generation = {
    id: 'gen-1',
    attempted: (a: AttemptRecord) => attempts.push(a),
    attempts,
    firstByte: () => {},
    finish: async (o: Outcome) => {
      finished.push(o)
      return null
    },
  } as unknown as Generation
  const result = tryCandidates(
    candidates,
    {
      generation,
      signal,
      log: pino({ level: 'silent' }),
      promptTokens: async () => 1,
      health,
      routing: cfg,
      now,
      sleep: async (ms) => {
        sleeps.push(ms)
        t += ms
      },
    },
    async (c) => {
      calls.push(c.deployment.id)
      t += 10
      const r = script(c.deployment.id, calls.filter((x) => x === c.deployment.id).length)
      if (r !== 'ok') throw r
      return `answer from ${c.deployment.id}`
    },
  )
  const settled = await result.then(
    (v) => ({ value: v.value, error: undefined }),
    (error: unknown) => ({ value: undefined, error }),
  )
  return { ...settled, calls, sleeps, attempts, finished, health }
}

describe('tryCandidates', () => {
  it('moves on to the next deployment at once, and answers from the first that works', async () => {
    const r = await run([candidate('a'), candidate('b'), candidate('c')], (id) =>
      id === 'c' ? 'ok' : fault(id, id === 'a' ? 503 : null),
    )
    expect(r.value).toBe('answer from c')
    expect(r.calls).toEqual(['a', 'b', 'c'])
    expect(r.sleeps).toEqual([])
    expect(r.attempts.map((a) => [a.deployment, a.status, a.outcome])).toEqual([
      ['a', 503, 'upstream_error'],
      ['b', null, 'upstream_timeout'],
      ['c', 200, 'ok'],
    ])
    expect(r.finished).toEqual([])
  })

  it('calls a deployment again after a backoff once every other had its turn', async () => {
    const r = await run([candidate('a'), candidate('b')], (id, n) =>
      id === 'a' && n === 2 ? 'ok' : fault(id, 500),
    )
    expect(r.value).toBe('answer from a')
    expect(r.calls).toEqual(['a', 'b', 'a'])
    // a's backoff (50–100 ms for the first retry) runs from its failure; b's call took 10 of it.
    expect(r.sleeps).toHaveLength(1)
    expect(r.sleeps[0]).toBeGreaterThanOrEqual(40)
    expect(r.sleeps[0]).toBeLessThanOrEqual(90)
  })

  it('never retries a request the upstream refused as the client’s fault', async () => {
    const r = await run([candidate('a'), candidate('b')], (id) => fault(id, 400))
    expect(r.calls).toEqual(['a'])
    expect(r.error).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(r.finished).toHaveLength(1)
    expect(r.finished[0]).toMatchObject({ produced: false, cancelled: false })
    expect(r.health.snapshot('m|a').consecutiveFailures).toBe(0)
  })

  it('answers with the last failure when every try failed, within attemptsPerDeployment', async () => {
    const r = await run([candidate('a'), candidate('b', 1)], (id) => fault(id, 502))
    expect(r.calls).toEqual(['a', 'b', 'a'])
    expect(r.error).toMatchObject({ status: 502 })
    expect(r.finished).toHaveLength(1)
  })

  it('stops at maxAttempts', async () => {
    const r = await run([candidate('a', 5), candidate('b', 5)], (id) => fault(id, 503), { maxAttempts: 3 })
    expect(r.calls).toEqual(['a', 'b', 'a'])
  })

  it('starts no attempt past the time budget', async () => {
    // Each call takes 10 ms of the fake clock; the budget covers the first two only.
    const r = await run([candidate('a', 5), candidate('b', 5), candidate('c', 5)], (id) => fault(id, 503), {
      budgetMs: 15,
    })
    expect(r.calls).toEqual(['a', 'b'])
  })

  it('waits out a short Retry-After on the same deployment, and skips a long one', async () => {
    const short = await run([candidate('a')], (id, n) =>
      n === 1 ? fault(id, 429, { 'retry-after': '2' }) : 'ok',
    )
    expect(short.calls).toEqual(['a', 'a'])
    expect(short.sleeps).toEqual([2_000])
    const long = await run([candidate('a')], (id) => fault(id, 429, { 'retry-after': '60' }), {
      maxRetryAfterMs: 10_000,
    })
    expect(long.calls).toEqual(['a'])
    expect(long.error).toMatchObject({ status: 429 })
    // Rate limited is not a failure of health.
    expect(long.health.snapshot('m|a').consecutiveFailures).toBe(0)
  })

  it('does not call a deployment again whose upstream refused the gateway’s key', async () => {
    const r = await run([candidate('a'), candidate('b')], (id, n) =>
      id === 'a' ? fault(id, 401) : n === 1 ? fault(id, 500) : 'ok',
    )
    expect(r.calls).toEqual(['a', 'b', 'b'])
  })

  it('makes no further call to a deployment whose breaker opened during the request', async () => {
    const r = await run([candidate('a', 3)], (id) => fault(id, 500), {
      breaker: { failureThreshold: 2, cooldownMs: 60_000 },
    })
    expect(r.calls).toEqual(['a', 'a'])
    expect(r.error).toMatchObject({ status: 502 })
    expect(r.health.snapshot('m|a').state).toBe('open')
  })

  it('503 no_available_provider when the breakers let no call through', async () => {
    const t = 0
    const cfg = { ...base, breaker: { failureThreshold: 1, cooldownMs: 60_000 } }
    const health = createHealth(cfg, () => t)
    health.failure('m|a')
    const finished: Outcome[] = []
    const err = await tryCandidates(
      [candidate('a')],
      {
        generation: {
          id: 'g',
          attempted: () => {},
          firstByte: () => {},
          finish: async (o: Outcome) => {
            finished.push(o)
            return null
          },
        } as unknown as Generation,
        signal: new AbortController().signal,
        log: pino({ level: 'silent' }),
        promptTokens: async () => 0,
        health,
        routing: cfg,
        now: () => t,
      },
      async () => {
        throw new Error('must not be called')
      },
    ).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(GatewayError)
    expect(err).toMatchObject({ status: 503, code: 'no_available_provider' })
    expect(finished).toHaveLength(1)
  })

  it('stops when the client leaves, and ends the generation as cancelled', async () => {
    const client = new AbortController()
    const r = await run(
      [candidate('a'), candidate('b')],
      (id) => {
        client.abort()
        return fault(id, 503)
      },
      {},
      client.signal,
    )
    expect(r.calls).toEqual(['a'])
    expect(r.finished[0]).toMatchObject({ produced: false, cancelled: true })
  })
})

describe('backoff and Retry-After', () => {
  it('doubles from backoffMs up to the cap, jittered over the upper half', () => {
    const policy = { backoffMs: 100, maxBackoffMs: 1_000 }
    expect([1, 2, 3, 4, 5].map((n) => backoffMs(policy, n, () => 1))).toEqual([100, 200, 400, 800, 1_000])
    expect([1, 2, 3].map((n) => backoffMs(policy, n, () => 0))).toEqual([50, 100, 200])
  })

  it('reads seconds and HTTP dates', () => {
    expect(retryAfterMs('3')).toBe(3_000)
    expect(retryAfterMs('Thu, 01 Jan 1970 00:00:10 GMT', 4_000)).toBe(6_000)
    expect(retryAfterMs('soon')).toBeUndefined()
    expect(retryAfterMs(undefined)).toBeUndefined()
  })
})

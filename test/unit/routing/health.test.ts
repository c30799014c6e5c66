import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../../src/config.ts'
import { createHealth } from '../../../src/routing/health.ts'

const routing = {
  ...loadConfig({ NODE_ENV: 'test' }).routing,
  breaker: { failureThreshold: 3, cooldownMs: 1_000 },
  latency: { alpha: 0.5, staleMs: 10_000 },
}

function clock() {
  let t = 0
  return { now: () => t, advance: (ms: number) => void (t += ms) }
}

describe('circuit breaker', () => {
  it('opens after the threshold of consecutive failures, not before', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    h.failure('d')
    h.failure('d')
    expect(h.snapshot('d')).toMatchObject({ state: 'closed', consecutiveFailures: 2 })
    expect(h.tryAcquire('d')).toBe(true)
    h.failure('d')
    expect(h.snapshot('d').state).toBe('open')
    expect(h.isAvailable('d')).toBe(false)
    expect(h.tryAcquire('d')).toBe(false)
  })

  it('a success in between resets the count', () => {
    const h = createHealth(routing, clock().now)
    h.failure('d')
    h.failure('d')
    h.success('d', 10)
    h.failure('d')
    h.failure('d')
    expect(h.snapshot('d')).toMatchObject({ state: 'closed', consecutiveFailures: 2 })
  })

  it('after the cooldown lets exactly one probe through; a good probe closes it', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    for (let i = 0; i < 3; i++) h.failure('d')
    c.advance(999)
    expect(h.tryAcquire('d')).toBe(false)
    c.advance(1)
    expect(h.snapshot('d').state).toBe('half_open')
    expect(h.tryAcquire('d')).toBe(true)
    // The probe is out: nobody else gets through until it reports.
    expect(h.isAvailable('d')).toBe(false)
    expect(h.tryAcquire('d')).toBe(false)
    h.success('d', 20)
    expect(h.snapshot('d')).toMatchObject({ state: 'closed', consecutiveFailures: 0 })
    expect(h.tryAcquire('d')).toBe(true)
  })

  it('a failed probe opens it again for a full cooldown', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    for (let i = 0; i < 3; i++) h.failure('d')
    c.advance(1_000)
    expect(h.tryAcquire('d')).toBe(true)
    h.failure('d')
    expect(h.snapshot('d').state).toBe('open')
    c.advance(999)
    expect(h.tryAcquire('d')).toBe(false)
    c.advance(1)
    expect(h.tryAcquire('d')).toBe(true)
  })

  it('a neutral end (client error, client gone) frees the probe without judging', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    for (let i = 0; i < 3; i++) h.failure('d')
    c.advance(1_000)
    expect(h.tryAcquire('d')).toBe(true)
    h.neutral('d')
    expect(h.snapshot('d').state).toBe('half_open')
    expect(h.tryAcquire('d')).toBe(true)
  })

  it('keeps deployments apart', () => {
    const h = createHealth(routing, clock().now)
    for (let i = 0; i < 3; i++) h.failure('a')
    expect(h.isAvailable('a')).toBe(false)
    expect(h.isAvailable('b')).toBe(true)
  })
})

describe('latency moving average', () => {
  it('is unmeasured first, then the first sample, then weighted by alpha', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    expect(h.latency('d')).toBeUndefined()
    h.success('d', 100)
    expect(h.latency('d')).toBe(100)
    h.success('d', 20)
    expect(h.latency('d')).toBe(60) // 0.5 × 20 + 0.5 × 100
    h.success('d', 20)
    expect(h.latency('d')).toBe(40)
  })

  it('forgets a measurement older than staleMs, and starts again from the next sample', () => {
    const c = clock()
    const h = createHealth(routing, c.now)
    h.success('d', 500)
    c.advance(9_999)
    expect(h.latency('d')).toBe(500)
    c.advance(1)
    expect(h.latency('d')).toBeUndefined()
    h.success('d', 30)
    expect(h.latency('d')).toBe(30)
  })
})

describe('error rate', () => {
  it('is a moving average of failures among the calls that told something, unknown before any', () => {
    const h = createHealth(routing, clock().now)
    expect(h.snapshot('d').errorRate).toBeUndefined()
    h.failure('d') // alpha 0.5: 0.5
    expect(h.snapshot('d').errorRate).toBe(0.5)
    h.success('d', 10) // 0.25
    h.neutral('d') // a client error or a client gone tells nothing
    expect(h.snapshot('d').errorRate).toBe(0.25)
    h.failure('d') // 0.5 + 0.125
    expect(h.snapshot('d').errorRate).toBe(0.625)
    expect(h.snapshot('other').errorRate).toBeUndefined()
  })
})

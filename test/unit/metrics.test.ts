import { Counter, Histogram, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { TallyCounter, TallyHistogram, createMetrics } from '../../src/metrics.ts'

// The request path counts its series in plain numbers (TallyCounter, TallyHistogram) instead of
// prom-client's labelled calls; /metrics must read exactly as prom-client's own counter and histogram
// fed the same observations would.

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

/** A fixed pseudo-random sequence, so that a failure can be replayed. */
function numbers(count: number, seed: number): number[] {
  let x = seed
  const out: number[] = []
  for (let i = 0; i < count; i++) {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648
    out.push(x / 2_147_483_648)
  }
  return out
}

describe('TallyCounter and TallyHistogram', () => {
  it('scrape as prom-client counters and histograms fed the same values', async () => {
    const mine = new Registry()
    const theirs = new Registry()
    const labelNames = ['route', 'model', 'provider', 'status'] as const
    const tc = new TallyCounter({ name: 'c_total', help: 'h', labelNames, registers: [mine] })
    const pc = new Counter({ name: 'c_total', help: 'h', labelNames, registers: [theirs] })
    const th = new TallyHistogram({
      name: 'h_seconds',
      help: 'h',
      labelNames: ['model', 'provider'],
      buckets: BUCKETS,
      registers: [mine],
    })
    const ph = new Histogram({
      name: 'h_seconds',
      help: 'h',
      labelNames: ['model', 'provider'],
      buckets: BUCKETS,
      registers: [theirs],
    })
    const routes = ['/v1/chat/completions', '/v1/embeddings', 'unmatched']
    const models = ['a/b', '', 'c/d "quoted"\\n']
    const statuses = [200, 499, 502]
    const values = [
      ...BUCKETS,
      ...BUCKETS.map((b) => b + 1e-9),
      0,
      301,
      1e6,
      ...numbers(400, 7).map((v) => v * 400),
    ]
    values.forEach((v, i) => {
      const route = routes[i % 3]!
      const model = models[(i >> 1) % 3]!
      const provider = i % 5 === 0 ? 'p1' : 'p2'
      const status = statuses[(i >> 2) % 3]!
      tc.add(i % 7, route, model, provider, status)
      pc.inc({ route, model, provider, status }, i % 7)
      th.observeAt(v, model, provider)
      ph.observe({ model, provider }, v)
    })
    expect(await mine.metrics()).toBe(await theirs.metrics())
    expect(await mine.getMetricsAsJSON()).toEqual(await theirs.getMetricsAsJSON())
    // A second scrape reads the same numbers (the counter is not added twice).
    expect(await mine.metrics()).toBe(await theirs.metrics())
  })

  it('refuses what prom-client refuses: a counter going down, a value that is not a number', () => {
    const registry = new Registry()
    const c = new TallyCounter({ name: 'x_total', help: 'h', labelNames: ['a'], registers: [registry] })
    const h = new TallyHistogram({
      name: 'y',
      help: 'h',
      labelNames: ['a'],
      buckets: [1],
      registers: [registry],
    })
    expect(() => c.add(-1, 'v')).toThrow(TypeError)
    expect(() => c.add(Number.NaN, 'v')).toThrow(TypeError)
    expect(() => h.observeAt(Number.POSITIVE_INFINITY, 'v')).toThrow(TypeError)
  })

  it("are the gateway's per-request series", async () => {
    const metrics = createMetrics()
    metrics.requests.add(1, '/v1/chat/completions', 'team/chat', 'up', 200)
    metrics.duration.observeAt(0.02, '/v1/chat/completions')
    metrics.ttfb.observeAt(0.01, 'team/chat', 'up')
    metrics.tokens.add(12, 'team/chat', 'prompt')
    metrics.cost.add(0.5, 'team/chat')
    const text = await metrics.registry.metrics()
    expect(text).toContain(
      'junction_requests_total{route="/v1/chat/completions",model="team/chat",provider="up",status="200"} 1',
    )
    expect(text).toContain(
      'junction_request_duration_seconds_bucket{le="0.025",route="/v1/chat/completions"} 1',
    )
    expect(text).toContain('junction_time_to_first_byte_seconds_count{model="team/chat",provider="up"} 1')
    expect(text).toContain('junction_tokens_total{model="team/chat",kind="prompt"} 12')
    expect(text).toContain('junction_cost_usd_total{model="team/chat"} 0.5')
  })
})

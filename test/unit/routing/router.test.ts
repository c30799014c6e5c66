import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../../src/config.ts'
import { createProviderRegistry } from '../../../src/providers/registry.ts'
import { createHealth } from '../../../src/routing/health.ts'
import { buildModelTable } from '../../../src/routing/model-table.ts'
import { createRouter, rankModels, type RouteRequest } from '../../../src/routing/router.ts'
import { thrownGatewayError } from '../../support/errors.ts'

const upstream = (port: number) => ({ kind: 'openai-compat', baseUrl: `http://127.0.0.1:${port}/v1` })

function setup(models: unknown[], breaker = { failureThreshold: 2, cooldownMs: 1_000 }) {
  const config = loadConfig({ GATEWAY_CONFIG: 'junction.json', NODE_ENV: 'test' }, () =>
    JSON.stringify({
      providers: { a: upstream(1), b: upstream(2), c: upstream(3) },
      models,
      routing: { breaker, latency: { alpha: 1, staleMs: 60_000 } },
    }),
  )
  let t = 0
  const now = () => t
  const health = createHealth(config.routing, now)
  const router = createRouter(buildModelTable(config), createProviderRegistry(config), health)
  const ids = (r: RouteRequest) => router.route(r).candidates.map((c) => c.deployment.id)
  return { router, health, ids, advance: (ms: number) => void (t += ms) }
}

const three = (extra: Record<string, unknown> = {}) => ({
  slug: 'team/m',
  deployments: [
    { provider: 'a', pricing: { prompt: 3, completion: 3 }, quality: 50 },
    { provider: 'b', pricing: { prompt: 1, completion: 1 }, quality: 90 },
    { provider: 'c', pricing: { prompt: 2, completion: 2 } },
  ],
  ...extra,
})
const chat = (extra: Partial<RouteRequest> = {}): RouteRequest => ({ slug: 'team/m', type: 'chat', ...extra })
const routing = (type: 'priority' | 'round_robin' | 'least_latency', providers: string[], more = {}) => ({
  provider: { routing: { type, providers, ...more } },
})

describe('router: one model', () => {
  it('keeps the configured order without extensions', () => {
    expect(setup([three()]).ids(chat())).toEqual(['a', 'b', 'c'])
  })

  it('priority follows the request’s list and keeps only the listed providers', () => {
    const { ids } = setup([three()])
    expect(ids(chat(routing('priority', ['c', 'a'])))).toEqual(['c', 'a'])
  })

  it('a listed provider that does not serve the model is a 400 naming the entry', () => {
    const { router } = setup([three()])
    expect(thrownGatewayError(() => router.route(chat(routing('priority', ['a', 'mock']))))).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'provider.routing.providers[1]',
    })
  })

  it('round robin gives each listed deployment the same share, first place rotating', () => {
    const { ids } = setup([three()])
    const firsts: Record<string, number> = { a: 0, b: 0, c: 0 }
    const seen: string[][] = []
    for (let i = 0; i < 300; i++) {
      const order = ids(chat(routing('round_robin', ['a', 'b', 'c'])))
      firsts[order[0] as string]!++
      if (i < 3) seen.push(order)
      // Every deployment is still there as a retry candidate.
      expect([...order].sort()).toEqual(['a', 'b', 'c'])
    }
    expect(firsts).toEqual({ a: 100, b: 100, c: 100 })
    expect(seen.map((o) => o[0])).toEqual(['a', 'b', 'c'])
  })

  it('round robin follows the configured weights, without bursts', () => {
    const { ids } = setup([
      {
        slug: 'team/m',
        routing: 'round_robin',
        deployments: [
          { provider: 'a', weight: 2 },
          { provider: 'b', weight: 1 },
        ],
      },
    ])
    const firsts = Array.from({ length: 9 }, () => ids(chat())[0])
    expect(firsts.filter((f) => f === 'a')).toHaveLength(6)
    // Smooth: never the lighter one twice in a row.
    expect(firsts.join('')).not.toContain('bb')
  })

  it('least latency prefers unmeasured deployments, then the fastest, and follows changes', () => {
    const { ids, health } = setup([three()])
    const req = chat(routing('least_latency', ['a', 'b', 'c']))
    expect(ids(req)).toEqual(['a', 'b', 'c'])
    health.success('team/m|a', 300)
    expect(ids(req)).toEqual(['b', 'c', 'a'])
    health.success('team/m|b', 50)
    health.success('team/m|c', 100)
    expect(ids(req)).toEqual(['b', 'c', 'a'])
    // b slows down (alpha 1: the newest sample is the average): it moves back.
    health.success('team/m|b', 500)
    expect(ids(req)).toEqual(['c', 'a', 'b'])
  })

  it('primary_factor sorts first and the type orders among equals', () => {
    const { ids } = setup([three()])
    expect(ids(chat(routing('priority', ['a', 'b', 'c'], { primary_factor: 'cost' })))).toEqual([
      'b',
      'c',
      'a',
    ])
    // Quality: b 90, a 50, c unscored (last).
    expect(ids(chat(routing('priority', ['c', 'a', 'b'], { primary_factor: 'quality' })))).toEqual([
      'b',
      'a',
      'c',
    ])
  })

  it('leaves out deployments with an open breaker, and 503s when none is left', () => {
    const { router, ids, health, advance } = setup([three()])
    health.failure('team/m|a')
    health.failure('team/m|a')
    expect(ids(chat())).toEqual(['b', 'c'])
    for (const d of ['b', 'c']) for (let i = 0; i < 2; i++) health.failure(`team/m|${d}`)
    expect(thrownGatewayError(() => router.route(chat()))).toMatchObject({
      status: 503,
      code: 'no_available_provider',
    })
    advance(1_000)
    // Half-open: each may take one probe again.
    expect(ids(chat())).toEqual(['a', 'b', 'c'])
  })
})

describe('router: other models', () => {
  const models = [
    three(),
    {
      slug: 'team/cheap',
      quality: 20,
      deployments: [{ provider: 'c', pricing: { prompt: 0.1, completion: 0.1 } }],
    },
    {
      slug: 'team/best',
      quality: 95,
      deployments: [{ provider: 'a', pricing: { prompt: 10, completion: 30 } }],
    },
    { slug: 'team/emb', type: 'embedding', deployments: [{ provider: 'a', pricing: { embedding: 1 } }] },
  ]

  it('the fallback slug’s deployments come after every deployment of the model', () => {
    const { router } = setup(models)
    const r = router.route(
      chat({ provider: { routing: { type: 'priority', providers: ['b'] }, fallback: 'team/cheap' } }),
    )
    expect(r.candidates.map((c) => [c.model.slug, c.deployment.id])).toEqual([
      ['team/m', 'b'],
      ['team/cheap', 'c'],
    ])
    expect(r.model.slug).toBe('team/m')
  })

  it('an unknown or mismatched fallback is refused with its param', () => {
    const { router } = setup(models)
    const fallback = (slug: string) =>
      thrownGatewayError(() =>
        router.route(chat({ provider: { routing: { type: 'priority', providers: ['a'] }, fallback: slug } })),
      )
    expect(fallback('team/none')).toMatchObject({ status: 404, param: 'provider.fallback' })
    expect(fallback('team/emb')).toMatchObject({ status: 400, param: 'provider.fallback' })
  })

  it('model_routing_config picks by preference, then complexity; the asked model comes last', () => {
    const { router } = setup(models)
    const pick = (cfg: Record<string, unknown>) =>
      router
        .route(chat({ modelRouting: { available_models: ['team/best', 'team/cheap'], ...cfg } }))
        .models.map((m) => m.slug)
    expect(pick({ preference: 'cost' })).toEqual(['team/cheap', 'team/best', 'team/m'])
    expect(pick({ preference: 'quality' })).toEqual(['team/best', 'team/cheap', 'team/m'])
    expect(pick({ preference: 'team/cheap' })).toEqual(['team/cheap', 'team/best', 'team/m'])
    expect(pick({ task_info: { complexity: 'low' } })).toEqual(['team/cheap', 'team/best', 'team/m'])
    expect(pick({ task_info: { complexity: 'high' } })).toEqual(['team/best', 'team/cheap', 'team/m'])
    expect(pick({ task_info: { complexity: 'medium' } })).toEqual(['team/best', 'team/cheap', 'team/m'])
  })

  it('model_routing_config errors name their field', () => {
    const { router } = setup(models)
    const err = (cfg: Record<string, unknown>) =>
      thrownGatewayError(() =>
        router.route(chat({ modelRouting: { available_models: ['team/cheap'], ...cfg } as never })),
      )
    expect(err({ available_models: ['team/cheap', 'no/such'] })).toMatchObject({
      status: 404,
      param: 'model_routing_config.available_models[1]',
    })
    expect(err({ available_models: [] })).toMatchObject({
      status: 400,
      param: 'model_routing_config.available_models',
    })
    expect(err({ preference: 'team/best' })).toMatchObject({
      status: 400,
      param: 'model_routing_config.preference',
    })
    expect(err({ task_info: { task_type: 'embedding' } })).toMatchObject({
      status: 400,
      param: 'model_routing_config.task_info.task_type',
    })
  })
})

describe('rankModels', () => {
  it('speed puts unmeasured models first, then the fastest deployment’s model', () => {
    const { router, health } = setup([
      three(),
      { slug: 'team/x', deployments: [{ provider: 'a' }] },
      { slug: 'team/y', deployments: [{ provider: 'b' }] },
    ])
    const models = ['team/m', 'team/x', 'team/y'].map((s) => router.models().find((m) => m.slug === s)!)
    health.success('team/x|a', 40)
    health.success('team/m|c', 20)
    const latency = (k: string) => health.latency(k)
    expect(rankModels(models, 'speed', undefined, { latency }).map((m) => m.slug)).toEqual([
      'team/y',
      'team/m',
      'team/x',
    ])
  })
})

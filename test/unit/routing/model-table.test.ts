import { describe, expect, it } from 'vitest'
import { builtinPrices } from '../../../src/billing/price-list.ts'
import { compilePrice } from '../../../src/billing/prices.ts'
import { loadConfig } from '../../../src/config.ts'
import { builtinModels } from '../../../src/providers/catalogue.ts'
import { createProviderRegistry } from '../../../src/providers/registry.ts'
import { buildModelTable } from '../../../src/routing/model-table.ts'
import { createHealth } from '../../../src/routing/health.ts'
import { createRouter } from '../../../src/routing/router.ts'
import { thrownGatewayError } from '../../support/errors.ts'

const withFile = (file: unknown, env: Record<string, string> = {}) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', ...env }, () => JSON.stringify(file))

describe('catalogue and price list', () => {
  it('name the same slugs: every built-in model has a list price and every list price a model', () => {
    const catalogue = builtinModels.map((m) => m.slug).sort()
    expect(Object.keys(builtinPrices).sort()).toEqual(catalogue)
  })
})

describe('buildModelTable', () => {
  it('merges catalogue and price list into one deployment per built-in slug', () => {
    const table = buildModelTable(loadConfig({ OPENAI_API_KEY: 'sk-test-0000' }))
    const m = table.get('openai/gpt-4o')
    expect(m).toMatchObject({ slug: 'openai/gpt-4o', type: 'chat' })
    expect(m?.deployments).toEqual([
      {
        id: 'openai',
        slug: 'openai/gpt-4o',
        provider: 'openai',
        upstreamModel: 'gpt-4o',
        price: compilePrice(builtinPrices['openai/gpt-4o'] ?? {}),
        priced: true,
        weight: 1,
      },
    ])
    // Providers that are not enabled bring no models.
    expect(table.get('groq/llama-3.1-8b-instant')).toBeUndefined()
  })

  it('a config model with several deployments keeps their order, prices and weights', () => {
    const table = buildModelTable(
      withFile({
        providers: {
          a: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:9/v1' },
          b: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:10/v1' },
        },
        models: [
          {
            slug: 'team/llama',
            maxOutputTokens: 2048,
            deployments: [
              { provider: 'a', upstreamModel: 'llama-a', pricing: { prompt: 1, completion: 2 } },
              { provider: 'b', upstreamModel: 'llama-b', pricing: { prompt: 3, completion: 4 }, weight: 3 },
              { provider: 'a', upstreamModel: 'llama-a2' },
            ],
          },
        ],
      }),
    )
    const m = table.get('team/llama')
    expect(m?.maxOutputTokens).toBe(2048)
    expect(m?.deployments.map((d) => [d.id, d.upstreamModel, d.priced, d.weight])).toEqual([
      ['a', 'llama-a', true, 1],
      ['b', 'llama-b', true, 3],
      ['a#2', 'llama-a2', false, 1],
    ])
    expect(m?.deployments[1]?.price.prompt).toBe(compilePrice({ prompt: 3 }).prompt)
  })

  it('a config entry replaces the catalogue entry of the same slug', () => {
    const table = buildModelTable(
      withFile({ models: [{ slug: 'mock/chat', pricing: { prompt: 7, completion: 9 } }] }),
    )
    expect(table.get('mock/chat')?.deployments[0]?.price.table).toEqual({ prompt: 7, completion: 9 })
    expect(table.list().filter((m) => m.slug === 'mock/chat')).toHaveLength(1)
  })
})

describe('router', () => {
  const config = withFile({
    providers: { a: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:9/v1' } },
    models: [
      { slug: 'team/m', deployments: [{ provider: 'a' }, { provider: 'mock', upstreamModel: 'chat' }] },
    ],
  })
  const router = createRouter(
    buildModelTable(config),
    createProviderRegistry(config),
    createHealth(config.routing),
  )

  it('returns the candidates in deployment order, each with its provider', () => {
    const r = router.route({ slug: 'team/m', type: 'chat' })
    expect(
      r.candidates.map((c) => [c.deployment.id, c.provider.config.name, c.deployment.upstreamModel]),
    ).toEqual([
      ['a', 'a', 'm'],
      ['mock', 'mock', 'chat'],
    ])
  })

  it('unknown slug 404, wrong type 400', () => {
    expect(thrownGatewayError(() => router.route({ slug: 'no/such', type: 'chat' }))).toMatchObject({
      status: 404,
      code: 'model_not_found',
      param: 'model',
    })
    expect(thrownGatewayError(() => router.route({ slug: 'mock/embed', type: 'chat' }))).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'model',
    })
  })

  it('503 when no deployment has a configured provider', () => {
    const empty = createRouter(
      buildModelTable(config),
      { get: () => undefined, close: async () => {} },
      createHealth(config.routing),
    )
    expect(thrownGatewayError(() => empty.route({ slug: 'mock/chat', type: 'chat' }))).toMatchObject({
      status: 503,
      code: 'no_available_provider',
    })
  })
})

describe('bare vendor names of the built-in OpenAI and Anthropic models', () => {
  const env = {
    OPENAI_API_KEY: 'sk-test-0000',
    ANTHROPIC_API_KEY: 'sk-ant-test-0000',
    GEMINI_API_KEY: 'g-test',
  }

  it('reach the catalogue model whose upstream model they are, and only those', () => {
    const table = buildModelTable(loadConfig(env))
    expect(table.get('gpt-5')?.slug).toBe('openai/gpt-5')
    expect(table.get('gpt-4o-mini')?.slug).toBe('openai/gpt-4o-mini')
    expect(table.get('text-embedding-3-small')?.slug).toBe('openai/text-embedding-3-small')
    expect(table.get('claude-sonnet-4-5')?.slug).toBe('anthropic/claude-sonnet-4-5')
    expect(table.get('claude-opus-4-6')?.slug).toBe('anthropic/claude-opus-4-6')
    // Not exact: a dated snapshot, another vendor's catalogue entry.
    expect(table.get('claude-sonnet-4-5-20250929')).toBeUndefined()
    expect(table.get('gemini-2.5-pro')).toBeUndefined()
    for (const m of builtinModels) {
      if (m.aliases !== undefined) expect(m.aliases).toEqual([m.upstreamModel])
    }
  })

  it('yield to the config file: its alias or slug takes the name; an override keeps the bare name', () => {
    const table = buildModelTable(
      withFile(
        {
          models: [
            { slug: 'team/fast', provider: 'openai', upstreamModel: 'gpt-4o-mini', aliases: ['gpt-5'] },
            { slug: 'anthropic/claude-sonnet-4-5', aliases: ['claude-sonnet-4-5-20250929'] },
          ],
        },
        env,
      ),
    )
    expect(table.get('gpt-5')?.slug).toBe('team/fast')
    expect(table.get('openai/gpt-5')?.aliases).toEqual([])
    expect(table.get('claude-sonnet-4-5-20250929')?.slug).toBe('anthropic/claude-sonnet-4-5')
    expect(table.get('claude-sonnet-4-5')?.slug).toBe('anthropic/claude-sonnet-4-5')
  })
})

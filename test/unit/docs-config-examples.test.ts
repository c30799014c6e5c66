import { describe, expect, it } from 'vitest'
import { hashKey } from '../../src/auth/index.ts'
import { loadConfig } from '../../src/config.ts'
import { codeBlocks, readPage, type DocPage } from '../support/docs.ts'

// The docs' configuration examples are what users copy: each must load as printed.

const jsonBlocks = (page: DocPage): string[] => codeBlocks(readPage(page), 'json')

const load = (json: string) => loadConfig({ GATEWAY_CONFIG: 'junction.json' }, () => json)

describe('documented configuration examples', () => {
  it('the example of the configuration page loads as printed, with no variable set', () => {
    const [example] = jsonBlocks('docs/operators/configuration.md')
    const config = load(example as string)
    expect(config.providers['local']?.apiKey).toBeUndefined()
    expect(config.accounts[0]?.keys).toEqual([
      { sha256: hashKey('sk-acme-change-me'), prefix: 'sk-acme-ch' },
      { sha256: hashKey('sk-acme-second-key') },
    ])
    expect(config.models.map((m) => m.slug)).toEqual(['local/llama', 'local/embed'])
  })

  it('the example of the routing page loads as printed', () => {
    const [example] = jsonBlocks('docs/operators/routing.md')
    const config = load(example as string)
    expect(config.models[0]).toMatchObject({ slug: 'team/llama', routing: 'round_robin', quality: 70 })
    expect(config.providers['west']?.retry.attemptsPerDeployment).toBe(1)
    expect(config.routing.breaker).toEqual({ failureThreshold: 5, cooldownMs: 30_000 })
  })

  it('the example of the webhooks page loads as printed', () => {
    const [example] = jsonBlocks('docs/clients/webhooks.md')
    const config = load(example as string)
    expect(config.predictions.webhooks).toMatchObject({ allowHttp: true, allowedHosts: ['127.0.0.1'] })
    expect(config.accounts[0]?.webhookSecret).toBe('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')
  })

  it('an apiKeyEnv naming an unset variable stops the start, naming it', () => {
    expect(() =>
      load(
        JSON.stringify({
          providers: {
            local: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:1/v1', apiKeyEnv: 'NOPE_KEY' },
          },
        }),
      ),
    ).toThrow('providers.local.apiKeyEnv: environment variable NOPE_KEY is not set')
  })
})

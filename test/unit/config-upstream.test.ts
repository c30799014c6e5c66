import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../../src/config.ts'

// The provider keys that bound an upstream call: timeouts.totalMs and maxResponseBytes.

const withProvider = (settings: Record<string, unknown>) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', LOCAL_KEY: 'secret' }, () =>
    JSON.stringify({
      providers: {
        local: {
          kind: 'openai-compat',
          baseUrl: 'http://127.0.0.1:9/v1',
          apiKeyEnv: 'LOCAL_KEY',
          ...settings,
        },
      },
    }),
  )

describe('provider limits', () => {
  it('default to 10 minutes in all and 256 MiB a blocking answer, built-in providers included', () => {
    expect(withProvider({}).providers.local).toMatchObject({
      timeouts: { connectMs: 10_000, firstByteMs: 120_000, idleMs: 60_000, totalMs: 600_000 },
      maxResponseBytes: 256 * 1024 * 1024,
    })
    expect(loadConfig({ OPENAI_API_KEY: 'sk-x' }).providers.openai).toMatchObject({
      timeouts: { totalMs: 600_000 },
      maxResponseBytes: 256 * 1024 * 1024,
    })
  })

  it('take configured values, a partial timeouts object keeping the other defaults', () => {
    expect(
      withProvider({ timeouts: { totalMs: 5_000 }, maxResponseBytes: 1_000 }).providers.local,
    ).toMatchObject({
      timeouts: { connectMs: 10_000, firstByteMs: 120_000, idleMs: 60_000, totalMs: 5_000 },
      maxResponseBytes: 1_000,
    })
  })

  it.each([
    [{ timeouts: { totalMs: 0 } }, /providers\.local\.timeouts\.totalMs/],
    [{ timeouts: { totalMs: 2 ** 31 } }, /providers\.local\.timeouts\.totalMs/],
    [{ timeouts: { idleMs: 2 ** 31 } }, /providers\.local\.timeouts\.idleMs/],
    [{ maxResponseBytes: 0 }, /providers\.local\.maxResponseBytes/],
    [{ maxResponseBytes: 500 * 1024 * 1024 + 1 }, /providers\.local\.maxResponseBytes/],
  ])('refuses %j', (settings, message) => {
    expect(() => withProvider(settings)).toThrow(ConfigError)
    expect(() => withProvider(settings)).toThrow(message)
  })
})

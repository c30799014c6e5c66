import { describe, expect, it } from 'vitest'
import { hashKey } from '../../src/auth/index.ts'
import { ConfigError, loadConfig } from '../../src/config.ts'
import { buildModelTable } from '../../src/routing/model-table.ts'

const withFile = (file: unknown, env: Record<string, string> = {}) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', ...env }, () => JSON.stringify(file))

describe('loadConfig', () => {
  it('zero-config: mock models, port 8080 and the development account with a warning flag', () => {
    const c = loadConfig({})
    expect(c.server.port).toBe(8080)
    expect(c.server.host).toBe('0.0.0.0')
    expect(
      buildModelTable(c)
        .list()
        .map((m) => m.slug),
    ).toEqual([
      'mock/chat',
      'mock/embed',
      'mock/image',
      'mock/video',
      'mock/speech',
      'mock/video-a',
      'mock/video-b',
      'mock/video-c',
    ])
    expect(c.devAccount).toBe(true)
    expect(c.accounts[0]?.keys[0]?.sha256).toBe(hashKey('sk-dev'))
  })

  it('bounds slow clients by default, and the file can change each bound', () => {
    expect(loadConfig({}).server).toMatchObject({
      requestTimeoutMs: 600_000,
      headersTimeoutMs: 30_000,
      bodyIdleTimeoutMs: 30_000,
      maxBufferedBodyBytes: 256 * 1024 * 1024,
      maxJsonDepth: 64,
    })
    const set = {
      requestTimeoutMs: 5000,
      bodyIdleTimeoutMs: 100,
      maxBufferedBodyBytes: 1000,
      maxJsonDepth: 8,
    }
    // Headers can't take longer than the whole request.
    expect(withFile({ server: set }).server).toMatchObject({ ...set, headersTimeoutMs: 5000 })
    expect(() => withFile({ server: { requestTimeoutMs: 1000, headersTimeoutMs: 2000 } })).toThrow(
      /server\.headersTimeoutMs/,
    )
  })

  it('PORT and HOST override the defaults', () => {
    const c = loadConfig({ PORT: '9999', HOST: '127.0.0.1' })
    expect(c.server).toMatchObject({ port: 9999, host: '127.0.0.1' })
    expect(() => loadConfig({ PORT: 'eighty' })).toThrow(/PORT/)
  })

  it('OPENAI_API_KEY enables OpenAI with its built-in models and OPENAI_BASE_URL moves it', () => {
    const c = loadConfig({ OPENAI_API_KEY: 'sk-x', OPENAI_BASE_URL: 'http://127.0.0.1:9/v1/' })
    expect(c.providers.openai).toMatchObject({
      kind: 'openai-compat',
      baseUrl: 'http://127.0.0.1:9/v1',
      apiKey: 'sk-x',
    })
    expect(buildModelTable(c).get('openai/gpt-4o-mini')).toMatchObject({
      type: 'chat',
      deployments: [{ provider: 'openai', upstreamModel: 'gpt-4o-mini' }],
    })
    expect(buildModelTable(c).get('openai/text-embedding-3-small')?.type).toBe('embedding')
  })

  it('production refuses to start without accounts', () => {
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(ConfigError)
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/accounts/)
  })

  it('accepts keys in plain text or as SHA-256, and keeps only hashes (and a plain key’s prefix)', () => {
    const c = withFile({
      accounts: [{ id: 'acme', keys: ['sk-acme-0001', { sha256: hashKey('sk-acme-0002') }] }],
    })
    expect(c.devAccount).toBe(false)
    expect(c.accounts[0]?.keys).toEqual([
      { sha256: hashKey('sk-acme-0001'), prefix: 'sk-acme-00' },
      { sha256: hashKey('sk-acme-0002') },
    ])
  })

  it('lists the account settings the file gives, defaults only for creation; credits to the picodollar', () => {
    const c = withFile({
      accounts: [
        { id: 'bare', keys: ['sk-bare-0001'], credits: 0.1 + 0.2 },
        {
          id: 'full',
          name: 'Full',
          keys: ['sk-full-0001'],
          discountPercent: 0.1,
          modelDiscounts: { 'mock/chat': 0.5 },
          rateLimits: { requestsPerMinute: 2 },
        },
      ],
    })
    expect(c.accounts[0]).toMatchObject({
      name: 'bare',
      discountPpm: 0,
      modelDiscountsPpm: {},
      rateLimits: {},
      given: [],
      initialCredits: 300_000_000_000n,
    })
    expect(c.accounts[1]?.given).toEqual(['name', 'discountPpm', 'modelDiscountsPpm', 'rateLimits'])
  })

  it('takes an account’s overdraftUsd exactly, leaves it unset when absent, and refuses a bad one', () => {
    const c = withFile({
      accounts: [
        { id: 'a', keys: ['sk-acme-0001'], overdraftUsd: 0.000001 },
        { id: 'b', keys: ['sk-acme-0002'] },
      ],
    })
    expect(c.accounts[0]?.overdraft).toBe(1_000_000n)
    expect(c.accounts[1]).not.toHaveProperty('overdraft')
    for (const overdraftUsd of [-1, 0.1234567890123, '1']) {
      expect(() => withFile({ accounts: [{ id: 'a', keys: ['sk-acme-0001'], overdraftUsd }] })).toThrow(
        /accounts\[0\]\.overdraftUsd/,
      )
    }
  })

  it('declares providers and models, key taken from the named environment variable', () => {
    const c = withFile(
      {
        providers: {
          local: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:11434/v1', apiKeyEnv: 'LOCAL_KEY' },
        },
        models: [{ slug: 'local/llama', upstreamModel: 'llama3.2:1b' }],
      },
      { LOCAL_KEY: 'secret' },
    )
    expect(c.providers.local?.apiKey).toBe('secret')
    expect(c.models).toEqual([
      {
        slug: 'local/llama',
        type: 'chat',
        maxOutputTokens: undefined,
        aliases: [],
        deployments: [{ provider: 'local', upstreamModel: 'llama3.2:1b', pricing: undefined, weight: 1 }],
      },
    ])
  })

  it.each([
    [{ server: { port: 'x' } }, /server\.port/],
    [{ providers: { p: { kind: 'nope' } } }, /providers\.p\.kind/],
    [{ providers: { p: { kind: 'openai-compat' } } }, /providers\.p\.baseUrl/],
    [
      { providers: { p: { kind: 'openai-compat', baseUrl: 'http://x/v1', apiKeyEnv: 'MISSING_VAR' } } },
      /MISSING_VAR/,
    ],
    [
      { providers: { c: { kind: 'anthropic', baseUrl: 'http://x', apiKeyEnv: 'UNSET_CLAUDE_KEY' } } },
      /UNSET_CLAUDE_KEY/,
    ],
    [{ models: [{ slug: 'no-slash' }] }, /models\[0\]\.slug/],
    [{ models: [{ slug: 'ghost/model' }] }, /models\[0\]\.provider/],
    [
      { models: [{ slug: 'mock/pic', type: 'image', family: 'speech' }] },
      /models\[0\]\.family: family speech is for speech models, not image/,
    ],
    [
      { models: [{ slug: 'mock/vid', type: 'video', family: 'image' }] },
      /models\[0\]\.family: family image is for image models, not video/,
    ],
    [{ models: [{ slug: 'mock/c', type: 'chat', family: 'video-a' }] }, /models\[0\]\.family: a chat model/],
    [
      { models: [{ slug: 'x/m', deployments: [{ provider: 'mock' }, { provider: 'ghost' }] }] },
      /models\[0\]\.deployments\[1\]\.provider: unknown or disabled provider "ghost"/,
    ],
    [
      { models: [{ slug: 'x/m', provider: 'mock', deployments: [{ provider: 'mock' }] }] },
      /models\[0\]\.deployments: give either/,
    ],
    [{ accounts: [{ id: 'a', keys: [{ sha256: 'zz' }] }] }, /accounts\[0\]\.keys\[0\]/],
    [{ unknownSection: true }, /unknownSection|unrecognized/i],
    [
      { predictions: { leaseMs: 10_000, webhooks: { timeoutMs: 6_000 } } },
      /predictions\.webhooks\.timeoutMs: 6000 ms must be at most half of predictions\.leaseMs/,
    ],
    [{ predictions: { outputSigningKey: 'short' } }, /predictions\.outputSigningKey/],
    [{ predictions: { webhooks: { schedule: [] } } }, /predictions\.webhooks\.schedule/],
  ])('a bad config names the field: %j', (file, pattern) => {
    expect(() => withFile(file)).toThrow(pattern)
  })

  it('an unreadable or non-JSON file is a ConfigError naming the path', () => {
    expect(() => loadConfig({ GATEWAY_CONFIG: 'x.json' }, () => '{oops')).toThrow(
      /GATEWAY_CONFIG \(x\.json\)/,
    )
  })
})

describe('predictions configuration', () => {
  it("one account's share of the task and webhook workers: a quarter by default, never more than all", () => {
    const load = (predictions: unknown) =>
      loadConfig({ GATEWAY_CONFIG: 'c.json' }, () => JSON.stringify({ predictions })).predictions
    expect(load({ concurrency: 2, webhooks: { concurrency: 40 } })).toMatchObject({
      concurrency: 2,
      accountConcurrency: 1,
      webhooks: { concurrency: 40, accountConcurrency: 10 },
    })
    expect(
      load({ concurrency: 4, accountConcurrency: 9, webhooks: { concurrency: 3, accountConcurrency: 2 } }),
    ).toMatchObject({ accountConcurrency: 4, webhooks: { concurrency: 3, accountConcurrency: 2 } })
  })

  it('has the documented defaults', () => {
    const c = loadConfig({})
    expect(c.predictions).toEqual({
      maxTaskMs: 30 * 60_000,
      pollIntervalMs: 1_000,
      maxPollIntervalMs: 30_000,
      leaseMs: 60_000,
      concurrency: 16,
      accountConcurrency: 4,
      outputsDir: './data/outputs',
      outputRetentionMs: 7 * 86_400_000,
      outputUrlTtlMs: 86_400_000,
      maxOutputBytes: 512 * 1024 ** 2,
      outputSigningKey: undefined,
      publicUrl: undefined,
      mockDelayMs: 3_000,
      ffmpegPath: 'ffmpeg',
      taskRetentionMs: 30 * 86_400_000,
      webhooks: {
        schedule: [5_000, 30_000, 120_000, 600_000, 3_600_000, 10_800_000],
        maxAttempts: 7,
        timeoutMs: 10_000,
        allowHttp: false,
        allowedHosts: [],
        concurrency: 16,
        accountConcurrency: 4,
      },
    })
  })

  it('takes the environment over the file, and keeps tasks at least as long as their outputs', () => {
    const c = loadConfig(
      {
        GATEWAY_CONFIG: 'x.json',
        GATEWAY_OUTPUTS_DIR: '/srv/out',
        GATEWAY_PUBLIC_URL: 'https://gw.example.com/',
        MOCK_TASK_DELAY_MS: '0',
      },
      () =>
        JSON.stringify({
          predictions: {
            outputsDir: '/ignored',
            outputRetentionMs: 90 * 86_400_000,
            taskRetentionMs: 60_000,
          },
        }),
    )
    expect(c.predictions).toMatchObject({
      outputsDir: '/srv/out',
      publicUrl: 'https://gw.example.com',
      mockDelayMs: 0,
      taskRetentionMs: 90 * 86_400_000,
    })
  })
})

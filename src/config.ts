import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { z } from 'zod'
import { formatPath } from './errors.ts'
import type { ProviderKind, UpstreamConfig } from './providers/types.ts'
import { builtinProviders, builtinModels, type BuiltinProvider } from './providers/catalogue.ts'

// The only reader of process.env. Everything else receives a Config.

export type ModelType = 'chat' | 'embedding' | 'image' | 'video' | 'speech'

export interface ModelConfig {
  slug: string
  provider: string
  upstreamModel: string
  type: ModelType
}

export interface AccountKeyConfig {
  /** SHA-256 of the key, lowercase hex. Plain keys from the config file are hashed at load. */
  sha256: string
}

export interface AccountConfig {
  id: string
  name: string
  keys: AccountKeyConfig[]
}

export interface Config {
  env: 'production' | 'development' | 'test'
  server: {
    host: string
    port: number
    /** Largest accepted JSON body. */
    bodyLimitBytes: number
    /** How long in-flight requests and streams get to finish after SIGTERM. */
    shutdownGraceMs: number
    logLevel: string
    /** How long an idle keep-alive client connection stays open. */
    keepAliveTimeoutMs: number
  }
  limits: {
    /** Open SSE streams one account may hold at once. */
    maxConcurrentStreamsPerAccount: number
  }
  providers: Record<string, UpstreamConfig & { maxConnections: number }>
  models: ModelConfig[]
  accounts: AccountConfig[]
  /** True when the built-in development account (key `sk-dev`) was added. */
  devAccount: boolean
}

export const DEV_KEY = 'sk-dev'

const hex64 = /^[0-9a-f]{64}$/

const timeoutsSchema = z
  .object({
    connectMs: z.number().int().positive().default(10_000),
    firstByteMs: z.number().int().positive().default(120_000),
    idleMs: z.number().int().positive().default(60_000),
  })
  .strict()

const providerSchema = z
  .object({
    kind: z.enum(['openai-compat', 'anthropic', 'gemini', 'mock']),
    baseUrl: z.url({ protocol: /^https?$/ }).optional(),
    /** Name of the environment variable holding the key: keys never live in the file. */
    apiKeyEnv: z.string().min(1).optional(),
    headers: z.record(z.string(), z.string()).default({}),
    timeouts: timeoutsSchema.default({ connectMs: 10_000, firstByteMs: 120_000, idleMs: 60_000 }),
    maxConnections: z.number().int().positive().max(10_000).default(256),
    latencyMs: z.number().int().min(0).max(600_000).default(0),
  })
  .strict()

const modelSchema = z
  .object({
    slug: z.string().regex(/^[^/\s]+\/\S+$/, 'must have the form provider/model_name'),
    provider: z.string().min(1).optional(),
    upstreamModel: z.string().min(1).optional(),
    type: z.enum(['chat', 'embedding', 'image', 'video', 'speech']).default('chat'),
  })
  .strict()

const keySchema = z.union([
  z.string().min(8, 'an API key must be at least 8 characters'),
  z.object({ sha256: z.string().regex(hex64, 'must be 64 lowercase hex characters') }).strict(),
])

const accountSchema = z
  .object({
    id: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/),
    name: z.string().max(200).optional(),
    keys: z.array(keySchema).min(1),
  })
  .strict()

const fileSchema = z
  .object({
    server: z
      .object({
        host: z.string().min(1).optional(),
        port: z.number().int().min(0).max(65535).optional(),
        bodyLimitBytes: z
          .number()
          .int()
          .positive()
          .max(1024 ** 3)
          .optional(),
        shutdownGraceMs: z.number().int().min(0).optional(),
        logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).optional(),
        keepAliveTimeoutMs: z.number().int().positive().optional(),
      })
      .strict()
      .default({}),
    limits: z
      .object({ maxConcurrentStreamsPerAccount: z.number().int().positive().optional() })
      .strict()
      .default({}),
    providers: z.record(z.string().regex(/^[a-z0-9][a-z0-9_-]*$/), providerSchema).default({}),
    models: z.array(modelSchema).default([]),
    accounts: z.array(accountSchema).default([]),
  })
  .strict()

type FileConfig = z.infer<typeof fileSchema>

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

const envSchema = z.object({
  NODE_ENV: z.string().optional(),
  PORT: z.coerce.number().int().min(0).max(65535).optional(),
  HOST: z.string().min(1).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).optional(),
  GATEWAY_CONFIG: z.string().min(1).optional(),
  GATEWAY_BODY_LIMIT_BYTES: z.coerce.number().int().positive().optional(),
  GATEWAY_SHUTDOWN_GRACE_MS: z.coerce.number().int().min(0).optional(),
  MOCK_LATENCY_MS: z.coerce.number().int().min(0).max(600_000).optional(),
})

function describeZod(err: z.ZodError, prefix: string): string {
  return err.issues.map((i) => `${prefix}${formatPath(i.path) ?? '(root)'}: ${i.message}`).join('; ')
}

/** API keys are stored and looked up by their SHA-256, never in plain text. */
export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex')
}

/**
 * Builds the Config from the environment and the optional JSON file named by GATEWAY_CONFIG.
 * Throws ConfigError naming the offending field; server.ts prints it and exits.
 */
export function loadConfig(
  env: Record<string, string | undefined>,
  readFile: (path: string) => string = (p) => readFileSync(p, 'utf8'),
): Config {
  const envParsed = envSchema.safeParse(env)
  if (!envParsed.success) throw new ConfigError(`invalid environment: ${describeZod(envParsed.error, '')}`)
  const e = envParsed.data

  let file: FileConfig
  if (e.GATEWAY_CONFIG === undefined) {
    file = fileSchema.parse({})
  } else {
    let raw: unknown
    try {
      raw = JSON.parse(readFile(e.GATEWAY_CONFIG))
    } catch (err) {
      throw new ConfigError(`cannot read GATEWAY_CONFIG (${e.GATEWAY_CONFIG}): ${(err as Error).message}`)
    }
    const parsed = fileSchema.safeParse(raw)
    if (!parsed.success) throw new ConfigError(`invalid config file: ${describeZod(parsed.error, '')}`)
    file = parsed.data
  }

  const nodeEnv = e.NODE_ENV === 'production' ? 'production' : e.NODE_ENV === 'test' ? 'test' : 'development'
  const providers = resolveProviders(file, env, e.MOCK_LATENCY_MS)
  const models = resolveModels(file, providers)

  const accounts: AccountConfig[] = file.accounts.map((a) => ({
    id: a.id,
    name: a.name ?? a.id,
    keys: a.keys.map((k) => ({ sha256: typeof k === 'string' ? hashKey(k) : k.sha256 })),
  }))
  let devAccount = false
  if (accounts.length === 0) {
    if (nodeEnv === 'production') {
      throw new ConfigError('accounts: at least one account is required when NODE_ENV is production')
    }
    accounts.push({ id: 'dev', name: 'development', keys: [{ sha256: hashKey(DEV_KEY) }] })
    devAccount = true
  }

  return {
    env: nodeEnv,
    server: {
      host: e.HOST ?? file.server.host ?? '0.0.0.0',
      port: e.PORT ?? file.server.port ?? 8080,
      bodyLimitBytes: e.GATEWAY_BODY_LIMIT_BYTES ?? file.server.bodyLimitBytes ?? 10 * 1024 * 1024,
      shutdownGraceMs: e.GATEWAY_SHUTDOWN_GRACE_MS ?? file.server.shutdownGraceMs ?? 30_000,
      logLevel: e.LOG_LEVEL ?? file.server.logLevel ?? 'info',
      keepAliveTimeoutMs: file.server.keepAliveTimeoutMs ?? 72_000,
    },
    limits: { maxConcurrentStreamsPerAccount: file.limits.maxConcurrentStreamsPerAccount ?? 1_000 },
    providers,
    models,
    accounts,
    devAccount,
  }
}

function resolveProviders(
  file: FileConfig,
  env: Record<string, string | undefined>,
  mockLatencyMs: number | undefined,
): Config['providers'] {
  const out: Config['providers'] = {}
  const add = (name: string, p: z.infer<typeof providerSchema>, preset?: BuiltinProvider): void => {
    const keyEnv = p.apiKeyEnv ?? preset?.keyEnv
    const apiKey = keyEnv === undefined ? undefined : env[keyEnv]
    if (p.kind === 'openai-compat' && p.apiKeyEnv !== undefined && !apiKey) {
      throw new ConfigError(`providers.${name}.apiKeyEnv: environment variable ${p.apiKeyEnv} is not set`)
    }
    const presetUrl = preset && ((preset.baseUrlEnv && env[preset.baseUrlEnv]) || preset.baseUrl)
    const baseUrl = p.baseUrl ?? presetUrl
    if (p.kind !== 'mock' && baseUrl === undefined) {
      throw new ConfigError(`providers.${name}.baseUrl: required for kind ${p.kind}`)
    }
    out[name] = {
      name,
      kind: p.kind as ProviderKind,
      baseUrl: (baseUrl ?? 'mock://local').replace(/\/+$/, ''),
      apiKey: apiKey || undefined,
      headers: p.headers,
      timeouts: p.timeouts,
      maxConnections: p.maxConnections,
      latencyMs: p.kind === 'mock' ? (mockLatencyMs ?? p.latencyMs) : 0,
    }
  }

  // Zero-config: a provider whose key variable is set is enabled with its built-in model list.
  for (const preset of builtinProviders) {
    if (preset.keyEnv === undefined || env[preset.keyEnv]) {
      add(preset.name, providerSchema.parse({ kind: preset.kind }), preset)
    }
  }
  for (const [name, p] of Object.entries(file.providers)) {
    add(
      name,
      p,
      builtinProviders.find((b) => b.name === name),
    )
  }
  return out
}

function resolveModels(file: FileConfig, providers: Config['providers']): ModelConfig[] {
  const bySlug = new Map<string, ModelConfig>()
  for (const m of builtinModels) {
    if (providers[m.provider]) bySlug.set(m.slug, { ...m })
  }
  file.models.forEach((m, i) => {
    const slash = m.slug.indexOf('/')
    const provider = m.provider ?? m.slug.slice(0, slash)
    if (!providers[provider]) {
      throw new ConfigError(`models[${i}].provider: unknown or disabled provider "${provider}"`)
    }
    bySlug.set(m.slug, {
      slug: m.slug,
      provider,
      upstreamModel: m.upstreamModel ?? m.slug.slice(slash + 1),
      type: m.type,
    })
  })
  return [...bySlug.values()]
}

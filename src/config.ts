import { hashKey, KEY_PREFIX_LENGTH } from './auth/keys.ts'
import { readFileSync } from 'node:fs'
import { z } from 'zod'
import { discountRateSchema as rate, overdraftSchema } from './schemas/billing.ts'
import { formatPath } from './errors.ts'
import type { ProviderKind, RetryPolicy, UpstreamConfig } from './providers/types.ts'
import { builtinProviders, type BuiltinProvider } from './providers/catalogue.ts'
import type { MediaFamily } from './providers/async-media/types.ts'
import { compilePrice, type PriceTable } from './billing/prices.ts'
import { buildModelTable, ModelNameConflict } from './routing/model-table.ts'
import type { CorsConfig } from './http/cors.ts'
import { checkModelPrices } from './routing/price-check.ts'
import { isWebhookSecret } from './predictions/webhook-signing.ts'
import { toPpm, usd, usdRounded, type Money } from './billing/money.ts'
import type { RateLimits } from './store/types.ts'

// The only reader of process.env. Everything else receives a Config.

export type ModelType = 'chat' | 'embedding' | 'image' | 'video' | 'speech'

/** The input rules a media model follows when its config entry names none: its type's generic family. */
export const DEFAULT_FAMILY: Record<'image' | 'video' | 'speech', MediaFamily> = {
  image: 'image',
  video: 'video',
  speech: 'speech',
}

/** One provider serving a model, as the config file names it (prices are merged in the model table). */
export interface DeploymentConfig {
  provider: string
  upstreamModel: string
  /** Replaces the price list's table for this deployment. */
  pricing?: PriceTable
  /** Share of round-robin traffic (routing); 1 unless configured. */
  weight: number
  /** Quality score 0–100 for `primary_factor: quality` and `preference: quality`; the model's when unset. */
  quality?: number
}

/** A model of the config file, validated; the model table (routing/model-table.ts) merges it with the catalogue. */
export interface ModelConfig {
  slug: string
  type: ModelType
  /** Most output tokens one answer can have: the reservation's bound when the client sets none. */
  maxOutputTokens?: number
  /** Quality score 0–100 (routing); deployments without their own take it. */
  quality?: number
  /** How its deployments are ordered when a request does not say (`priority` by default). */
  routing?: 'priority' | 'round_robin' | 'least_latency'
  /** Image, video and speech models: the input rules their predictions follow. */
  family?: MediaFamily
  /** Other names requests may use for this model (bare vendor names such as `gpt-5`). */
  aliases: string[]
  deployments: DeploymentConfig[]
}

/** Asynchronous predictions (predictions/): how tasks run, where their outputs live, how webhooks go out. */
export interface PredictionsConfig {
  /** A task still processing this long after creation fails with `timeout`. */
  maxTaskMs: number
  /** First wait between two polls of an upstream job; doubled each poll up to `maxPollIntervalMs`. */
  pollIntervalMs: number
  maxPollIntervalMs: number
  /** How long an instance holds a task (or a webhook delivery) it works on before another may take it. */
  leaseMs: number
  /** Tasks one instance works on at once. */
  concurrency: number
  /** Of those, at most this many of one account: a slow upstream of one account cannot take them all. */
  accountConcurrency: number
  /** Where generated images, videos and audio are kept. */
  outputsDir: string
  /** Outputs (bytes and their URLs) are deleted this long after the task ended. */
  outputRetentionMs: number
  /** Lifetime of a signed output URL handed out by a lookup or a webhook. */
  outputUrlTtlMs: number
  /** Largest output file accepted from an upstream. */
  maxOutputBytes: number
  /** Signs output URLs; when unset, one is generated and kept in the store (shared by every instance). */
  outputSigningKey?: string
  /** Origin put in output URLs (`https://gateway.example.com`); else the creating request's own host. */
  publicUrl?: string
  /** The mock provider's task duration, unless a prompt says `[mock:delay=<ms>]`. */
  mockDelayMs: number
  /** The ffmpeg executable that encodes speech to MP3 and Ogg Opus (and renders the mock's video). */
  ffmpegPath: string
  /** Finished tasks are deleted this long after they ended (never before their outputs). */
  taskRetentionMs: number
  webhooks: {
    /** Waits before retry n (ms): exponential with jitter applied at send time. */
    schedule: number[]
    /** Deliveries of one event at most (the first plus retries). */
    maxAttempts: number
    /** One attempt: connect, headers and body. */
    timeoutMs: number
    /** Local development and tests only: accept http:// webhook URLs. */
    allowHttp: boolean
    /** Local development and tests only: hosts exempt from the private-address check. */
    allowedHosts: string[]
    /** Deliveries one instance sends at once, and at most this many of one account. */
    concurrency: number
    accountConcurrency: number
  }
}

/** Retries, circuit breaking and latency tracking (routing/health.ts, inference/attempts.ts). */
export interface RoutingConfig {
  /** Most upstream calls one request makes, over every deployment and fallback. */
  maxAttempts: number
  /** No new attempt starts once this long has passed since the request's first attempt. */
  budgetMs: number
  /** A 429's Retry-After is waited out on the same deployment only up to this; longer moves on. */
  maxRetryAfterMs: number
  /** Defaults for every provider; a provider's own `retry` overrides them. */
  retry: RetryPolicy
  breaker: {
    /** Consecutive failures that take a deployment out of rotation. */
    failureThreshold: number
    /** How long it stays out before one probe request is let through. */
    cooldownMs: number
  }
  latency: {
    /** Weight of the newest time-to-first-byte in the moving average (0–1). */
    alpha: number
    /** A measurement older than this no longer counts: the deployment is measured again. */
    staleMs: number
  }
}

export interface AccountKeyConfig {
  /** SHA-256 of the key, lowercase hex. Plain keys from the config file are hashed at load. */
  sha256: string
  /** The first characters of a key given in plain text, for the admin API's listing (as for issued keys). */
  prefix?: string
}

export interface AccountConfig {
  id: string
  name: string
  keys: AccountKeyConfig[]
  /** Credits an account starts with the first time the ledger sees it. */
  initialCredits: Money
  discountPpm: number
  modelDiscountsPpm: Record<string, number>
  rateLimits: RateLimits
  /**
   * The settings the file gives (its others take their defaults above, used only to create the
   * account): only these are applied to an account that already exists.
   */
  given: AccountSetting[]
  /** How far a charge may pass its hold, and the balance go below zero (absent: left as it is, 0 new). */
  overdraft?: Money
  /** The account's webhook signing secret (`whsec_…`), applied at every start; generated when absent. */
  webhookSecret?: string
}

/** The account settings a config file can set, by their AccountConfig names. */
export type AccountSetting = 'name' | 'discountPpm' | 'modelDiscountsPpm' | 'rateLimits'

/** Where the state lives: `GATEWAY_DATABASE_URL` or the config file's `database.url`. */
export type DatabaseBackend =
  { kind: 'memory' } | { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string }

export interface DatabaseConfig {
  backend: DatabaseBackend
  /** Generation records older than this are deleted by housekeeping; usage totals stay. Kept forever when unset. */
  retentionDays?: number
  /** PostgreSQL: connections per gateway process. */
  poolSize?: number
  /** SQLite: how long a call waits for the database thread before failing with 503 `store_unavailable`. */
  timeoutMs: number
  /** How long `/readyz` waits for the store to answer before failing (503). */
  readyTimeoutMs: number
}

/** The embedded default: next to the default files directory, whatever files.dir says. */
export const DEFAULT_DATABASE_PATH = './data/junction.db'

/**
 * `memory`; `sqlite:<path>` or a path ending .db/.sqlite/.sqlite3; `postgres://…` / `postgresql://…`.
 * Throws ConfigError for anything else (a typo must not silently pick a backend).
 */
export function parseDatabaseUrl(url: string, from: string): DatabaseBackend {
  if (url === 'memory') return { kind: 'memory' }
  if (/^postgres(ql)?:\/\//.test(url)) return { kind: 'postgres', url }
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '')
    if (path === '') throw new ConfigError(`${from}: sqlite: needs a file path (sqlite:./data/junction.db)`)
    return { kind: 'sqlite', path }
  }
  if (/\.(db|sqlite|sqlite3)$/.test(url)) return { kind: 'sqlite', path: url }
  throw new ConfigError(
    `${from}: expected memory, sqlite:<path>, a path ending .db or .sqlite, or postgres://…`,
  )
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
    /** Longest time to receive a whole request, body included (408 after it). */
    requestTimeoutMs: number
    /** Longest time to receive a request's headers (408 after it). */
    headersTimeoutMs: number
    /** Longest silence while a request body is still arriving (408 after it). */
    bodyIdleTimeoutMs: number
    /** Bytes of unfinished JSON bodies held across all connections; past it new bytes are refused (503). */
    maxBufferedBodyBytes: number
    /** The most of maxBufferedBodyBytes one account may hold; past it its new bytes are refused (429). */
    maxBufferedBodyBytesPerAccount: number
    /** Slowest a request body may arrive, in bytes per second over bodyRateWindowMs (408 below it); 0: no floor. */
    bodyMinBytesPerSecond: number
    /** The window of the rate floor, and the grace before it is first checked. */
    bodyRateWindowMs: number
    /** Deepest nesting of objects and arrays a JSON body may have (400 `too_deep` past it). */
    maxJsonDepth: number
    /** Open connections one client address may hold; past it a new one is closed at once. 0: no limit. */
    maxConnectionsPerAddress: number
    /** Browser access to /v1 and /routed/v1 (http/cors.ts); off while allowedOrigins is empty. */
    cors: CorsConfig
  }
  limits: {
    /** How long a reservation holds credits if its request never settles it (crash, hang). */
    reservationTtlMs: number
    /** Output bound used for the reservation when neither the client nor the model gives one. */
    defaultMaxOutputTokens: number
    /** Applied to accounts that set no rate limits of their own. */
    defaultRateLimits: RateLimits
  }
  /** Admin API key (GATEWAY_ADMIN_KEY); the admin API is off without one. */
  adminKey?: string
  providers: Record<string, UpstreamConfig & { maxConnections: number }>
  /** The config file's models only; the built-in catalogue is merged in by the model table. */
  models: ModelConfig[]
  accounts: AccountConfig[]
  /** True when the built-in development account (key `sk-dev`) was added. */
  devAccount: boolean
  files: {
    /** Directory of uploaded files (created on first upload). */
    dir: string
    /** Largest single upload (413 above). */
    maxFileBytes: number
    maxFilesPerAccount: number
    maxBytesPerAccount: number
    /** Most file bytes inlined into one chat request by file references (413 above). */
    maxInlineBytesPerRequest: number
    /** Stored bytes no record points at are removed once older than this (a crash mid-upload). */
    orphanGraceMs: number
  }
  database: DatabaseConfig
  routing: RoutingConfig
  predictions: PredictionsConfig
  /** The browser console at /console (src/console/). */
  console: ConsoleConfig
}

export interface ConsoleConfig {
  enabled: boolean
  /**
   * Signs session cookies; instances that share it accept each other's sessions. Absent: a key derived
   * from the output signing key (configured, or generated once and kept in the store).
   */
  sessionSecret?: string
  /** How long a console session lasts after sign-in. */
  sessionTtlMs: number
  /** Sign-in attempts per minute from one client address. */
  signInsPerMinute: number
}

export const DEV_KEY = 'sk-dev'
export const DEV_CREDITS_USD = 100

const hex64 = /^[0-9a-f]{64}$/
/** Ten minutes: a 512 MiB upload (the default file limit) fits at about 1 MB/s. */
const DEFAULT_REQUEST_TIMEOUT_MS = 600_000

/** Node's timers take at most 2^31 − 1 ms; a longer delay would fire at once. */
const timeoutMs = z
  .number()
  .int()
  .positive()
  .max(2 ** 31 - 1)

const timeoutsSchema = z
  .object({
    connectMs: timeoutMs
      .default(10_000)
      .describe('Longest time to open the TCP (and TLS) connection to the upstream.'),
    firstByteMs: timeoutMs
      .default(120_000)
      .describe("Longest time from sending the request to the upstream's response headers."),
    idleMs: timeoutMs
      .default(60_000)
      .describe("Longest silence between two chunks of the upstream's body, streams included."),
    // One bound for blocking calls and streams alike: 10 minutes is what OpenAI's own SDKs allow a
    // request, room for a slow reasoning answer or ~60k streamed tokens at 100 tokens/s, and it ends
    // before limits.reservationTtlMs (15 minutes) lets the call's credit reservation lapse.
    totalMs: timeoutMs
      .default(600_000)
      .describe(
        'Longest time from sending the request to the answer fully read, streams included (504 `upstream_timeout` past it).',
      ),
  })
  .strict()

const MiB = 1024 * 1024

const retrySchema = z
  .object({
    attemptsPerDeployment: z
      .number()
      .int()
      .min(1)
      .max(10)
      .optional()
      .describe(
        'Calls one request may make to one deployment (the first included); `routing.retry` gives the default, 2.',
      ),
    backoffMs: z
      .number()
      .int()
      .min(0)
      .max(60_000)
      .optional()
      .describe(
        'First wait before calling a deployment again, doubled each time, with jitter; `routing.retry` gives the default, 250.',
      ),
    maxBackoffMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .optional()
      .describe('Longest wait between two calls of one deployment; `routing.retry` gives the default, 4000.'),
  })
  .strict()

const routingSchema = z
  .object({
    maxAttempts: z
      .number()
      .int()
      .min(1)
      .max(20)
      .default(4)
      .describe('Most upstream calls one request makes, over every deployment and fallback.'),
    budgetMs: timeoutMs
      .default(60_000)
      .describe("No new attempt starts once this long has passed since the request's first attempt."),
    maxRetryAfterMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .default(10_000)
      .describe(
        "A 429's Retry-After is waited out on the same deployment only up to this; a longer one moves on.",
      ),
    retry: retrySchema
      .default({})
      .describe(
        "Retry defaults for every provider (a provider's own `retry` overrides them): `attemptsPerDeployment`, `backoffMs`, `maxBackoffMs`.",
      ),
    breaker: z
      .object({
        failureThreshold: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .default(5)
          .describe('Consecutive failures that take a deployment out of rotation.'),
        cooldownMs: timeoutMs
          .default(30_000)
          .describe('How long a deployment stays out of rotation before one probe request is let through.'),
      })
      .strict()
      .prefault({})
      .describe('Circuit breaking per deployment, per instance.'),
    latency: z
      .object({
        alpha: z
          .number()
          .gt(0)
          .max(1)
          .default(0.3)
          .describe('Weight of the newest time to first byte in the moving average (0–1).'),
        staleMs: timeoutMs
          .default(300_000)
          .describe('A measurement older than this no longer counts: the deployment is measured again.'),
      })
      .strict()
      .prefault({})
      .describe('The moving average of time to first byte that `least_latency` and `speed` read.'),
  })
  .strict()

const providerSchema = z
  .object({
    kind: z
      .enum(['openai-compat', 'anthropic', 'gemini', 'replicate', 'mock'])
      .describe('The wire protocol the provider speaks.'),
    baseUrl: z
      .url({ protocol: /^https?$/ })
      .optional()
      .describe(
        "Where the provider answers; a built-in provider's name brings its own (and its `…_BASE_URL` variable).",
      ),
    /** Name of the environment variable holding the key: keys never live in the file. */
    apiKeyEnv: z
      .string()
      .min(1)
      .optional()
      .describe(
        "Name of the environment variable that holds the provider's key (keys never live in the file); unset: no key is sent.",
      ),
    headers: z
      .record(z.string(), z.string())
      .default({})
      .describe('Extra headers sent with every call to this provider.'),
    timeouts: timeoutsSchema.prefault({}).describe('Upstream timeouts of this provider.'),
    /**
     * Most bytes read from a blocking answer's body, after decompression (streams: 8 MiB an event).
     * The default holds the largest OpenAI embeddings answer in JSON: 2,048 inputs × 3,072 floats,
     * pretty-printed one float a line, at most 32 bytes each ≈ 201 MB. The body is parsed as one
     * string, and V8's strings end at 2^29 − 24 characters: hence at most 500 MiB.
     */
    maxResponseBytes: z
      .number()
      .int()
      .positive()
      .max(500 * MiB)
      .default(256 * MiB)
      .describe(
        "Most bytes read from a blocking answer's body after decompression (502 past it); stream events are capped at 8 MiB each.",
      ),
    /** Open connections per upstream origin; requests beyond it queue. Streams hold one each. */
    maxConnections: z
      .number()
      .int()
      .positive()
      .max(10_000)
      .default(1024)
      .describe('Open connections per upstream origin; requests beyond it queue, and a stream holds one.'),
    latencyMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .default(0)
      .describe('The mock provider only: delay before each answer, its chunks spaced a tenth of it.'),
    outputLimitField: z
      .enum(['max_completion_tokens', 'max_tokens'])
      .optional()
      .describe(
        'OpenAI-compatible providers: the field the output limit is sent in; `max_tokens` unless the provider is `openai` or `groq`.',
      ),
    /** Overrides `routing.retry` for this provider's deployments. */
    retry: retrySchema.optional().describe("Overrides `routing.retry` for this provider's deployments."),
  })
  .strict()

const price = z.number().min(0).max(1_000_000)
const priceSchema = z
  .object({
    prompt: price.optional().describe('USD per million prompt tokens.'),
    cachedPrompt: price.optional().describe("USD per million prompt tokens read from the provider's cache."),
    cacheWrite: price.optional().describe("USD per million prompt tokens written to the provider's cache."),
    completion: price.optional().describe('USD per million completion tokens.'),
    reasoning: price.optional().describe('USD per million reasoning tokens; `completion` when unset.'),
    audioPrompt: price.optional().describe('USD per million audio prompt tokens.'),
    audioCompletion: price.optional().describe('USD per million audio completion tokens.'),
    embedding: price.optional().describe('USD per million embedding input tokens.'),
    imageByTier: z
      .record(z.string(), price)
      .optional()
      .describe('Image models: USD per image, by resolution tier (`1K`, `2K`, `4K`).'),
    videoPerSecond: z
      .record(z.string(), price)
      .optional()
      .describe('Video models: USD per second of video, by resolution (`720P`, …).'),
    speechPerMillionCharacters: price
      .optional()
      .describe('Speech models: USD per million characters of prompt and style instructions.'),
    speechAudioTokens: price.optional().describe('Speech models: USD per million output audio tokens.'),
  })
  .strict()
  .superRefine((table, ctx) => {
    try {
      compilePrice(table)
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message })
    }
  })

const deploymentSchema = z
  .object({
    provider: z.string().min(1).describe('The configured or built-in provider serving this deployment.'),
    upstreamModel: z
      .string()
      .min(1)
      .optional()
      .describe('The model id sent upstream; the rest of the slug when unset.'),
    pricing: priceSchema.optional().describe("Replaces the price list's table for this deployment."),
    weight: z.number().int().min(1).max(1000).default(1).describe('Share of round-robin traffic.'),
    quality: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe(
        "Quality score 0–100 for `primary_factor: quality` and `preference: quality`; the model's when unset.",
      ),
  })
  .strict()

const modelSchema = z
  .object({
    slug: z
      .string()
      .regex(/^[^/\s]+\/\S+$/, 'must have the form provider/model_name')
      .describe('The name requests use, `provider/model_name`.'),
    provider: z
      .string()
      .min(1)
      .optional()
      .describe("The provider serving the model; the slug's first segment when unset."),
    upstreamModel: z
      .string()
      .min(1)
      .optional()
      .describe('The model id sent upstream; the rest of the slug when unset.'),
    type: z
      .enum(['chat', 'embedding', 'image', 'video', 'speech'])
      .default('chat')
      .describe('What the model serves: chat and embeddings, or predictions (image, video, speech).'),
    /** Replaces the catalogue's price table for this slug. */
    pricing: priceSchema
      .optional()
      .describe("Replaces the price list's table for this slug (`{}` makes it free on purpose)."),
    maxOutputTokens: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        "Most output tokens one answer can have: the reservation's bound when the client sets none (`limits.defaultMaxOutputTokens` when unset).",
      ),
    quality: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe('Quality score 0–100 (routing); deployments without their own take it.'),
    routing: z
      .enum(['priority', 'round_robin', 'least_latency'])
      .optional()
      .describe('How its deployments are ordered when a request does not say.'),
    /** Image, video and speech models: which input rules apply (the type's generic family by default). */
    family: z
      .enum(['image', 'video', 'speech', 'video-a', 'video-b', 'video-c'])
      .optional()
      .describe(
        "Image, video and speech models: the input rules their predictions follow (the type's generic family when unset).",
      ),
    /** Several providers serving the slug, in priority order (instead of provider/upstreamModel/pricing). */
    deployments: z
      .array(deploymentSchema)
      .min(1)
      .max(32)
      .optional()
      .describe(
        'Several providers serving the slug, in priority order (instead of `provider`, `upstreamModel`, `pricing`).',
      ),
    /** Other names requests may use (bare vendor names clients send, such as `claude-sonnet-4-5-20250929`). */
    aliases: z
      .array(
        z
          .string()
          .max(256)
          .regex(/^[^/\s]+(\/\S+)?$/, 'an alias is a name without spaces'),
      )
      .max(64)
      .default([])
      .describe('Other names requests may use for this model, such as bare vendor names (`gpt-5`).'),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (m.family !== undefined && (m.type === 'chat' || m.type === 'embedding')) {
      ctx.addIssue({ code: 'custom', path: ['family'], message: `a ${m.type} model has no input family` })
    }
    const kind =
      m.family === undefined ? undefined : m.family === 'speech' ? 'speech' : m.family.replace(/-.*/, '')
    if (kind !== undefined && m.type !== kind && m.type !== 'chat' && m.type !== 'embedding') {
      ctx.addIssue({
        code: 'custom',
        path: ['family'],
        message: `family ${m.family} is for ${kind} models, not ${m.type}`,
      })
    }
    if (m.deployments && (m.provider !== undefined || m.upstreamModel !== undefined || m.pricing)) {
      ctx.addIssue({
        code: 'custom',
        path: ['deployments'],
        message: 'give either deployments or provider/upstreamModel/pricing, not both',
      })
    }
  })

const rateLimitsSchema = z
  .object({
    requestsPerMinute: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Requests admitted per sliding minute (429 past it).'),
    tokensPerMinute: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'Tokens per sliding minute, estimated before the request and corrected by its usage (429 past it).',
      ),
  })
  .strict()

const keySchema = z.union([
  z.string().min(8, 'an API key must be at least 8 characters'),
  z.object({ sha256: z.string().regex(hex64, 'must be 64 lowercase hex characters') }).strict(),
])

const accountSchema = z
  .object({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/)
      .describe("The account's id (letters, digits, `_`, `.`, `-`; at most 64)."),
    name: z.string().max(200).optional().describe('A display name; the id when unset.'),
    keys: z
      .array(keySchema)
      .min(1)
      .describe(
        'API keys of the account: a key in plain text (at least 8 characters, hashed at load) or `{"sha256": "<64 hex>"}`.',
      ),
    /** USD the account starts with. */
    credits: z
      .number()
      .min(0)
      .max(1e9)
      .default(0)
      .describe('USD the account starts with, applied only when the account is created.'),
    // No defaults below: an unset field must stay unset, so it is not applied over an existing
    // account's (admin-made) value. The defaults are applied when the account is created.
    /** 0.75 = 75 % off the upstream cost. */
    discountPercent: rate
      .optional()
      .describe('Discount rate on the upstream cost: 0.75 is 75 % off (0 for a new account when unset).'),
    modelDiscounts: z
      .record(z.string(), rate)
      .optional()
      .describe('Discount rates for single models, by slug, over `discountPercent`.'),
    rateLimits: rateLimitsSchema
      .optional()
      .describe("The account's own rate limits; `limits.rateLimits` when unset."),
    /**
     * USD a request may be charged past its hold when the upstream reports more than admission
     * allowed for, and the balance go below zero; 0 (none) unless set.
     */
    overdraftUsd: overdraftSchema
      .optional()
      .describe(
        'USD a charge may pass its hold, and the balance go below zero; 0 for a new account when unset.',
      ),
    /** Standard Webhooks secret signing this account's prediction webhooks. */
    webhookSecret: z
      .string()
      .refine(isWebhookSecret, 'must be whsec_ followed by base64 of 24 to 64 bytes')
      .optional()
      .describe(
        "The Standard Webhooks secret (`whsec_…`) signing the account's prediction webhooks; generated when unset.",
      ),
  })
  .strict()

export const fileSchema = z
  .object({
    server: z
      .object({
        host: z.string().min(1).optional().describe('Address to listen on.'),
        port: z.number().int().min(0).max(65535).optional().describe('Port to listen on (0: any free port).'),
        bodyLimitBytes: z
          .number()
          .int()
          .positive()
          .max(1024 ** 3)
          .optional()
          .describe('Largest JSON body (413 above).'),
        shutdownGraceMs: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('How long in-flight requests and streams get to finish after SIGTERM or SIGINT.'),
        logLevel: z
          .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
          .optional()
          .describe('pino log level (`silent` turns logs off).'),
        keepAliveTimeoutMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('How long an idle keep-alive client connection stays open.'),
        requestTimeoutMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Longest time to receive a whole request, body included (408 after it).'),
        headersTimeoutMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            "Longest time to receive a request's headers (408 after it); at most `requestTimeoutMs`.",
          ),
        bodyIdleTimeoutMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Longest silence while a request body is still arriving (408 after it).'),
        maxBufferedBodyBytes: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            'Bytes of unfinished JSON bodies held across all connections; past it new bytes are refused (503 `server_busy`).',
          ),
        maxBufferedBodyBytesPerAccount: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            'The most of `maxBufferedBodyBytes` one account may hold (429 past it); a quarter of it, at least `bodyLimitBytes`, when unset.',
          ),
        bodyMinBytesPerSecond: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('Slowest a request body may arrive over `bodyRateWindowMs` (408 below it); 0: no floor.'),
        bodyRateWindowMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('The window of the body rate floor, and the grace before it is first checked.'),
        maxJsonDepth: z
          .number()
          .int()
          .min(2)
          .max(1000)
          .optional()
          .describe('Deepest nesting of objects and arrays a JSON body may have (400 `too_deep` past it).'),
        maxConnectionsPerAddress: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe(
            'Open connections one client address may hold; past it a new one is closed unread. 0: no limit (leave it so behind a reverse proxy).',
          ),
        cors: z
          .object({
            /** Exact origins (`https://app.example.com`) or `*`. */
            allowedOrigins: z
              .array(
                z.string().refine(isOriginOrStar, 'must be * or an origin such as https://app.example.com'),
              )
              .describe(
                'Exact origins (`https://app.example.com`) or `*` allowed to call the API from a browser.',
              ),
          })
          .strict()
          .optional()
          .describe('Browser access to `/v1` and `/routed/v1`; off while `allowedOrigins` is empty.'),
      })
      .strict()
      .refine(
        (s) =>
          s.headersTimeoutMs === undefined ||
          s.headersTimeoutMs <= (s.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
        { message: 'headersTimeoutMs must not be above requestTimeoutMs', path: ['headersTimeoutMs'] },
      )
      .default({})
      .describe('The HTTP server and the limits on clients.'),
    limits: z
      .object({
        reservationTtlMs: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            'How long a reservation holds credits if its request never settles it (a crash); renewed while the request runs.',
          ),
        defaultMaxOutputTokens: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            'Output bound used for the reservation, and sent upstream, when neither the client nor the model gives one.',
          ),
        rateLimits: rateLimitsSchema
          .optional()
          .describe('Rate limits of accounts that set none of their own.'),
      })
      .strict()
      .default({})
      .describe('Credit reservations and rate limits.'),
    providers: z
      .record(z.string().regex(/^[a-z0-9][a-z0-9_-]*$/), providerSchema)
      .default({})
      .describe('Providers by name: OpenAI-compatible servers, Anthropic, Gemini, Replicate, the mock.'),
    models: z.array(modelSchema).default([]).describe('Models besides (or replacing) the built-in ones.'),
    accounts: z
      .array(accountSchema)
      .default([])
      .describe(
        'Accounts applied at every start: created when missing, the fields given applied when changed.',
      ),
    files: z
      .object({
        dir: z
          .string()
          .min(1)
          .optional()
          .describe('Directory of uploaded files (created on the first upload).'),
        maxFileBytes: z.number().int().positive().optional().describe('Largest single upload (413 above).'),
        maxFilesPerAccount: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Files one account may keep (400 `file_limit_exceeded` past it).'),
        maxBytesPerAccount: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Bytes one account may keep (413 past it).'),
        maxInlineBytesPerRequest: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Most file bytes inlined into one chat request by file references (413 above).'),
        orphanGraceMs: z
          .number()
          .int()
          .min(60_000)
          .optional()
          .describe(
            'Stored bytes no record points at are removed once older than this (a crash mid-upload).',
          ),
      })
      .strict()
      .default({})
      .describe('Uploaded files.'),
    database: z
      .object({
        url: z
          .string()
          .min(1)
          .optional()
          .describe(
            '`memory`, `sqlite:<path>` (or a path ending `.db`, `.sqlite`, `.sqlite3`) or `postgres://…`; `sqlite:./data/junction.db` when unset.',
          ),
        retentionDays: z
          .number()
          .positive()
          .max(1_000_000)
          .optional()
          .describe(
            'Generation records (and stored Responses answers) older than this are deleted; kept forever when unset.',
          ),
        poolSize: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe('PostgreSQL: connections per gateway process (10 when unset).'),
        timeoutMs: z
          .number()
          .int()
          .min(100)
          .max(600_000)
          .optional()
          .describe(
            'SQLite: how long a call waits for the database thread before failing with 503 `store_unavailable`.',
          ),
        readyTimeoutMs: z
          .number()
          .int()
          .min(100)
          .max(600_000)
          .optional()
          .describe('How long `/readyz` waits for the store to answer before failing (503).'),
      })
      .strict()
      .default({})
      .describe('Where the state lives and how it is kept.'),
    routing: routingSchema.prefault({}).describe('Retries, circuit breaking and latency tracking.'),
    console: z
      .object({
        enabled: z
          .boolean()
          .optional()
          .describe('Serve the browser console at /console (`GATEWAY_CONSOLE=off` turns it off).'),
        sessionSecret: z
          .string()
          .min(32, 'must be at least 32 characters')
          .optional()
          .describe(
            "Key signing console sessions (`GATEWAY_CONSOLE_SECRET`); instances sharing it accept each other's sessions. Derived from the output signing key when unset.",
          ),
        sessionTtlMs: z
          .number()
          .int()
          .min(60_000)
          .max(7 * 86_400_000)
          .optional()
          .describe('How long a console session lasts after sign-in.'),
        signInsPerMinute: z
          .number()
          .int()
          .min(1)
          .max(10_000)
          .optional()
          .describe('Console sign-in attempts one client address may make per minute.'),
      })
      .strict()
      .default({})
      .describe('The browser console.'),
    predictions: z
      .object({
        maxTaskMs: timeoutMs
          .optional()
          .describe('A task still processing this long after creation fails with `timeout`.'),
        pollIntervalMs: z
          .number()
          .int()
          .min(10)
          .max(600_000)
          .optional()
          .describe(
            'First wait between two polls of an upstream job; doubled each poll up to `maxPollIntervalMs`.',
          ),
        maxPollIntervalMs: z
          .number()
          .int()
          .min(10)
          .max(3_600_000)
          .optional()
          .describe('Longest wait between two polls of an upstream job.'),
        leaseMs: z
          .number()
          .int()
          .min(1000)
          .max(3_600_000)
          .optional()
          .describe(
            'How long an instance holds a task (or a webhook delivery) it works on before another may take it.',
          ),
        concurrency: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe('Tasks one instance works on at once.'),
        accountConcurrency: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe(
            'Of those, at most this many of one account; a quarter of `concurrency` (at least 1) when unset.',
          ),
        outputsDir: z
          .string()
          .min(1)
          .optional()
          .describe('Where generated images, videos and audio are kept.'),
        outputRetentionMs: z
          .number()
          .int()
          .min(60_000)
          .optional()
          .describe('Outputs (bytes and their URLs) are deleted this long after the task ended.'),
        outputUrlTtlMs: z
          .number()
          .int()
          .min(1000)
          .max(365 * 86_400_000)
          .optional()
          .describe('Lifetime of a signed output URL handed out by a lookup or a webhook.'),
        maxOutputBytes: z
          .number()
          .int()
          .positive()
          .max(2 * 1024 ** 3)
          .optional()
          .describe('Largest output file accepted from an upstream.'),
        outputSigningKey: z
          .string()
          .min(32, 'must be at least 32 characters')
          .optional()
          .describe(
            'Signs output URLs; when unset, one is generated and kept in the store (shared by every instance).',
          ),
        publicUrl: z
          .url({ protocol: /^https?$/ })
          .optional()
          .describe(
            "Origin put in output URLs (`https://gateway.example.com`); the creating request's own host when unset.",
          ),
        mockDelayMs: z
          .number()
          .int()
          .min(0)
          .max(600_000)
          .optional()
          .describe('How long a mock prediction takes, unless its prompt says `[mock:delay=<ms>]`.'),
        ffmpegPath: z
          .string()
          .min(1)
          .optional()
          .describe(
            "The ffmpeg executable that encodes speech to MP3 and Ogg Opus and renders the mock's video.",
          ),
        taskRetentionMs: z
          .number()
          .int()
          .min(60_000)
          .optional()
          .describe('Finished tasks are deleted this long after they ended (never before their outputs).'),
        webhooks: z
          .object({
            schedule: z
              .array(z.number().int().min(0).max(86_400_000))
              .min(1)
              .max(50)
              .optional()
              .describe('Waits before each retry (ms), with ±20 % jitter; the last one repeats.'),
            maxAttempts: z
              .number()
              .int()
              .min(1)
              .max(100)
              .optional()
              .describe(
                "Deliveries of one event at most (the first plus retries); the schedule's length + 1 when unset.",
              ),
            timeoutMs: z
              .number()
              .int()
              .min(100)
              .max(300_000)
              .optional()
              .describe(
                'One delivery attempt: connect, headers and body; at most half of `predictions.leaseMs`.',
              ),
            allowHttp: z
              .boolean()
              .optional()
              .describe('Local development and tests only: accept `http://` webhook URLs.'),
            allowedHosts: z
              .array(z.string().min(1).max(253))
              .max(100)
              .optional()
              .describe('Local development and tests only: hosts exempt from the private-address check.'),
            concurrency: z
              .number()
              .int()
              .min(1)
              .max(1000)
              .optional()
              .describe('Deliveries one instance sends at once.'),
            accountConcurrency: z
              .number()
              .int()
              .min(1)
              .max(1000)
              .optional()
              .describe(
                'Of those, at most this many to one account; a quarter of `concurrency` (at least 1) when unset.',
              ),
          })
          .strict()
          .default({})
          .describe('Webhook deliveries.'),
      })
      .strict()
      .default({ webhooks: {} })
      .describe('Asynchronous predictions: how tasks run, where their outputs live, how webhooks go out.'),
  })
  .strict()

type FileConfig = z.infer<typeof fileSchema>

/** `*`, or scheme://host[:port] exactly as a browser sends it in Origin (no path, no trailing slash). */
function isOriginOrStar(value: string): boolean {
  if (value === '*') return true
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.origin === value
  } catch {
    return false
  }
}

export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

export const envSchema = z.object({
  NODE_ENV: z
    .string()
    .optional()
    .describe(
      '`production` refuses to start without accounts (no `sk-dev`); `test` and anything else run as development.',
    ),
  PORT: z.coerce.number().int().min(0).max(65535).optional().describe('Port to listen on.'),
  HOST: z.string().min(1).optional().describe('Address to listen on.'),
  LOG_LEVEL: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .optional()
    .describe('pino log level.'),
  GATEWAY_CONFIG: z.string().min(1).optional().describe('Path of the JSON config file.'),
  GATEWAY_BODY_LIMIT_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe('Largest JSON body (413 above).'),
  GATEWAY_SHUTDOWN_GRACE_MS: z.coerce
    .number()
    .int()
    .min(0)
    .optional()
    .describe('How long in-flight requests and streams get after SIGTERM or SIGINT.'),
  MOCK_LATENCY_MS: z.coerce
    .number()
    .int()
    .min(0)
    .max(600_000)
    .optional()
    .describe('Delay before each answer of the mock provider (its chunks spaced a tenth of it).'),
  GATEWAY_FILES_DIR: z.string().min(1).optional().describe('Directory of uploaded files.'),
  GATEWAY_MAX_FILE_BYTES: z.coerce.number().int().positive().optional().describe('Largest single upload.'),
  GATEWAY_MAX_FILES_PER_ACCOUNT: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe('Files one account may keep.'),
  GATEWAY_MAX_FILE_BYTES_PER_ACCOUNT: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe('Bytes one account may keep.'),
  GATEWAY_MAX_INLINE_FILE_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe('Most file bytes inlined into one chat request.'),
  GATEWAY_ADMIN_KEY: z
    .string()
    .min(16, 'must be at least 16 characters')
    .optional()
    .describe('Enables the admin API (`/admin`) and `/metrics`, and is their bearer key; read at start.'),
  GATEWAY_DATABASE_URL: z
    .string()
    .min(1)
    .optional()
    .describe('Where state is kept: `memory`, `sqlite:<path>` or `postgres://…`.'),
  GATEWAY_OUTPUTS_DIR: z
    .string()
    .min(1)
    .optional()
    .describe('Where prediction outputs are kept (a directory every instance reads).'),
  GATEWAY_PUBLIC_URL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .describe("Origin put in output URLs; the request's own host when unset."),
  GATEWAY_OUTPUT_SIGNING_KEY: z
    .string()
    .min(32, 'must be at least 32 characters')
    .optional()
    .describe(
      'Key signing output URLs (at least 32 characters); generated and kept in the store when unset.',
    ),
  MOCK_TASK_DELAY_MS: z.coerce
    .number()
    .int()
    .min(0)
    .max(600_000)
    .optional()
    .describe('How long a mock prediction takes.'),
  GATEWAY_CONSOLE: z
    .enum(['on', 'off', 'true', 'false', '1', '0'])
    .optional()
    .describe('`off` turns the browser console at /console off (on by default).'),
  GATEWAY_CONSOLE_SECRET: z
    .string()
    .min(32, 'must be at least 32 characters')
    .optional()
    .describe('Key signing console sessions; else derived from the output signing key.'),
})

/** Every environment variable the gateway reads itself (provider presets add their key and base URL). */
export const ENV_VARIABLES: readonly string[] = Object.keys(envSchema.shape)

function describeZod(err: z.ZodError, prefix: string): string {
  return err.issues.map((i) => `${prefix}${formatPath(i.path) ?? '(root)'}: ${i.message}`).join('; ')
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
  const routing = resolveRouting(file.routing)
  const providers = resolveProviders(file, env, e.MOCK_LATENCY_MS, routing.retry)
  const models = resolveModels(file, providers)

  const accounts: AccountConfig[] = file.accounts.map((a) => ({
    id: a.id,
    name: a.name ?? a.id,
    keys: a.keys.map((k) =>
      typeof k === 'string'
        ? { sha256: hashKey(k), prefix: k.slice(0, KEY_PREFIX_LENGTH) }
        : { sha256: k.sha256 },
    ),
    initialCredits: usdRounded(a.credits),
    discountPpm: toPpm(a.discountPercent ?? 0),
    modelDiscountsPpm: Object.fromEntries(
      Object.entries(a.modelDiscounts ?? {}).map(([m, r]) => [m, toPpm(r)]),
    ),
    rateLimits: a.rateLimits ?? {},
    given: (
      [
        ['name', a.name],
        ['discountPpm', a.discountPercent],
        ['modelDiscountsPpm', a.modelDiscounts],
        ['rateLimits', a.rateLimits],
      ] as const
    )
      .filter(([, value]) => value !== undefined)
      .map(([setting]) => setting),
    ...(a.overdraftUsd === undefined ? {} : { overdraft: usd(a.overdraftUsd) }),
    webhookSecret: a.webhookSecret,
  }))
  let devAccount = false
  if (accounts.length === 0) {
    if (nodeEnv === 'production') {
      throw new ConfigError('accounts: at least one account is required when NODE_ENV is production')
    }
    accounts.push({
      id: 'dev',
      name: 'development',
      keys: [{ sha256: hashKey(DEV_KEY), prefix: DEV_KEY }],
      initialCredits: usd(DEV_CREDITS_USD),
      discountPpm: 0,
      modelDiscountsPpm: {},
      rateLimits: {},
      given: ['name', 'discountPpm', 'modelDiscountsPpm', 'rateLimits'],
    })
    devAccount = true
  }

  const requestTimeoutMs = file.server.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
  const bodyLimitBytes = e.GATEWAY_BODY_LIMIT_BYTES ?? file.server.bodyLimitBytes ?? 10 * 1024 * 1024
  const maxBufferedBodyBytes = file.server.maxBufferedBodyBytes ?? 256 * 1024 * 1024
  const config: Config = {
    env: nodeEnv,
    server: {
      host: e.HOST ?? file.server.host ?? '0.0.0.0',
      port: e.PORT ?? file.server.port ?? 8080,
      bodyLimitBytes,
      shutdownGraceMs: e.GATEWAY_SHUTDOWN_GRACE_MS ?? file.server.shutdownGraceMs ?? 30_000,
      logLevel: e.LOG_LEVEL ?? file.server.logLevel ?? 'info',
      keepAliveTimeoutMs: file.server.keepAliveTimeoutMs ?? 72_000,
      requestTimeoutMs,
      headersTimeoutMs: file.server.headersTimeoutMs ?? Math.min(30_000, requestTimeoutMs),
      bodyIdleTimeoutMs: file.server.bodyIdleTimeoutMs ?? 30_000,
      maxBufferedBodyBytes,
      maxBufferedBodyBytesPerAccount: Math.min(
        maxBufferedBodyBytes,
        file.server.maxBufferedBodyBytesPerAccount ??
          Math.max(bodyLimitBytes, Math.floor(maxBufferedBodyBytes / 4)),
      ),
      bodyMinBytesPerSecond: file.server.bodyMinBytesPerSecond ?? 1024,
      bodyRateWindowMs: file.server.bodyRateWindowMs ?? 10_000,
      maxJsonDepth: file.server.maxJsonDepth ?? 64,
      maxConnectionsPerAddress: file.server.maxConnectionsPerAddress ?? 0,
      cors: { allowedOrigins: file.server.cors?.allowedOrigins ?? [] },
    },
    limits: {
      reservationTtlMs: file.limits.reservationTtlMs ?? 15 * 60_000,
      defaultMaxOutputTokens: file.limits.defaultMaxOutputTokens ?? 16_384,
      defaultRateLimits: file.limits.rateLimits ?? {},
    },
    adminKey: e.GATEWAY_ADMIN_KEY,
    providers,
    models,
    accounts,
    devAccount,
    files: {
      dir: e.GATEWAY_FILES_DIR ?? file.files.dir ?? './data/files',
      maxFileBytes: e.GATEWAY_MAX_FILE_BYTES ?? file.files.maxFileBytes ?? 512 * 1024 * 1024,
      maxFilesPerAccount: e.GATEWAY_MAX_FILES_PER_ACCOUNT ?? file.files.maxFilesPerAccount ?? 10_000,
      maxBytesPerAccount:
        e.GATEWAY_MAX_FILE_BYTES_PER_ACCOUNT ?? file.files.maxBytesPerAccount ?? 10 * 1024 ** 3,
      maxInlineBytesPerRequest:
        e.GATEWAY_MAX_INLINE_FILE_BYTES ?? file.files.maxInlineBytesPerRequest ?? 32 * 1024 * 1024,
      orphanGraceMs: file.files.orphanGraceMs ?? 60 * 60_000,
    },
    database: {
      backend:
        e.GATEWAY_DATABASE_URL !== undefined
          ? parseDatabaseUrl(e.GATEWAY_DATABASE_URL, 'GATEWAY_DATABASE_URL')
          : file.database.url !== undefined
            ? parseDatabaseUrl(file.database.url, 'database.url')
            : { kind: 'sqlite', path: DEFAULT_DATABASE_PATH },
      retentionDays: file.database.retentionDays,
      poolSize: file.database.poolSize,
      timeoutMs: file.database.timeoutMs ?? 5000,
      readyTimeoutMs: file.database.readyTimeoutMs ?? 2000,
    },
    routing,
    predictions: resolvePredictions(file.predictions, e),
    console: {
      enabled:
        e.GATEWAY_CONSOLE === undefined
          ? (file.console.enabled ?? true)
          : ['on', 'true', '1'].includes(e.GATEWAY_CONSOLE),
      sessionSecret: e.GATEWAY_CONSOLE_SECRET ?? file.console.sessionSecret,
      sessionTtlMs: file.console.sessionTtlMs ?? 60 * 60_000,
      signInsPerMinute: file.console.signInsPerMinute ?? 10,
    },
  }
  // Every configured price must be chargeable from what its provider reports, or nothing starts.
  let table
  try {
    table = buildModelTable(config)
  } catch (err) {
    if (err instanceof ModelNameConflict) throw new ConfigError(err.message)
    throw err
  }
  const problems = checkModelPrices(table, (name) => providers[name]?.kind)
  if (problems.length > 0) throw new ConfigError(`prices: ${problems.join('\n')}`)
  return config
}

const DEFAULT_WEBHOOK_SCHEDULE = [5_000, 30_000, 120_000, 600_000, 3_600_000, 10_800_000]

function resolvePredictions(p: FileConfig['predictions'], e: z.infer<typeof envSchema>): PredictionsConfig {
  const pollIntervalMs = p.pollIntervalMs ?? 1_000
  const schedule = p.webhooks.schedule ?? DEFAULT_WEBHOOK_SCHEDULE
  const leaseMs = p.leaseMs ?? 60_000
  const webhookTimeoutMs = p.webhooks.timeoutMs ?? 10_000
  // A lease must outlast the work done under it, or another instance repeats a delivery in flight.
  if (webhookTimeoutMs * 2 > leaseMs) {
    throw new ConfigError(
      `predictions.webhooks.timeoutMs: ${webhookTimeoutMs} ms must be at most half of predictions.leaseMs (${leaseMs} ms)`,
    )
  }
  const concurrency = p.concurrency ?? 16
  const webhookConcurrency = p.webhooks.concurrency ?? 16
  return {
    maxTaskMs: p.maxTaskMs ?? 30 * 60_000,
    pollIntervalMs,
    maxPollIntervalMs: Math.max(pollIntervalMs, p.maxPollIntervalMs ?? 30_000),
    leaseMs,
    concurrency,
    accountConcurrency: Math.min(concurrency, p.accountConcurrency ?? fairShare(concurrency)),
    outputsDir: e.GATEWAY_OUTPUTS_DIR ?? p.outputsDir ?? './data/outputs',
    outputRetentionMs: p.outputRetentionMs ?? 7 * 86_400_000,
    outputUrlTtlMs: p.outputUrlTtlMs ?? 86_400_000,
    maxOutputBytes: p.maxOutputBytes ?? 512 * 1024 ** 2,
    outputSigningKey: e.GATEWAY_OUTPUT_SIGNING_KEY ?? p.outputSigningKey,
    publicUrl: (e.GATEWAY_PUBLIC_URL ?? p.publicUrl)?.replace(/\/+$/, ''),
    mockDelayMs: e.MOCK_TASK_DELAY_MS ?? p.mockDelayMs ?? 3_000,
    ffmpegPath: p.ffmpegPath ?? 'ffmpeg',
    taskRetentionMs: Math.max(p.taskRetentionMs ?? 30 * 86_400_000, p.outputRetentionMs ?? 7 * 86_400_000),
    webhooks: {
      schedule,
      maxAttempts: p.webhooks.maxAttempts ?? schedule.length + 1,
      timeoutMs: webhookTimeoutMs,
      allowHttp: p.webhooks.allowHttp ?? false,
      allowedHosts: p.webhooks.allowedHosts ?? [],
      concurrency: webhookConcurrency,
      accountConcurrency: Math.min(
        webhookConcurrency,
        p.webhooks.accountConcurrency ?? fairShare(webhookConcurrency),
      ),
    },
  }
}

/** One account's default share of an instance's task or webhook workers: a quarter, at least one. */
const fairShare = (workers: number): number => Math.max(1, Math.floor(workers / 4))

function resolveRouting(r: FileConfig['routing']): RoutingConfig {
  const backoffMs = r.retry.backoffMs ?? 250
  return {
    maxAttempts: r.maxAttempts,
    budgetMs: r.budgetMs,
    maxRetryAfterMs: r.maxRetryAfterMs,
    retry: {
      attemptsPerDeployment: r.retry.attemptsPerDeployment ?? 2,
      backoffMs,
      maxBackoffMs: Math.max(backoffMs, r.retry.maxBackoffMs ?? 4_000),
    },
    breaker: r.breaker,
    latency: r.latency,
  }
}

function resolveProviders(
  file: FileConfig,
  env: Record<string, string | undefined>,
  mockLatencyMs: number | undefined,
  retry: RetryPolicy,
): Config['providers'] {
  const out: Config['providers'] = {}
  const add = (name: string, p: z.infer<typeof providerSchema>, preset?: BuiltinProvider): void => {
    const keyEnv = p.apiKeyEnv ?? preset?.keyEnv
    const apiKey = keyEnv === undefined ? undefined : env[keyEnv]
    if (p.kind !== 'mock' && p.apiKeyEnv !== undefined && !apiKey) {
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
      maxResponseBytes: p.maxResponseBytes,
      maxConnections: p.maxConnections,
      latencyMs: p.kind === 'mock' ? (mockLatencyMs ?? p.latencyMs) : 0,
      outputLimitField: p.outputLimitField ?? preset?.outputLimitField ?? 'max_tokens',
      retry: {
        attemptsPerDeployment: p.retry?.attemptsPerDeployment ?? retry.attemptsPerDeployment,
        backoffMs: p.retry?.backoffMs ?? retry.backoffMs,
        maxBackoffMs: Math.max(
          p.retry?.backoffMs ?? retry.backoffMs,
          p.retry?.maxBackoffMs ?? retry.maxBackoffMs,
        ),
      },
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

/** The file's models, each as a list of deployments whose providers exist and are enabled. */
function resolveModels(file: FileConfig, providers: Config['providers']): ModelConfig[] {
  return file.models.map((m, i) => {
    const slash = m.slug.indexOf('/')
    const deployments: DeploymentConfig[] = (
      m.deployments ?? [
        {
          provider: m.provider ?? m.slug.slice(0, slash),
          upstreamModel: m.upstreamModel,
          pricing: m.pricing,
          weight: 1,
        },
      ]
    ).map((d) => ({ ...d, upstreamModel: d.upstreamModel ?? m.slug.slice(slash + 1) }))
    deployments.forEach((d, j) => {
      if (!providers[d.provider]) {
        const path = m.deployments ? `models[${i}].deployments[${j}].provider` : `models[${i}].provider`
        throw new ConfigError(`${path}: unknown or disabled provider "${d.provider}"`)
      }
    })
    return {
      slug: m.slug,
      type: m.type,
      maxOutputTokens: m.maxOutputTokens,
      quality: m.quality,
      routing: m.routing,
      family: m.type === 'chat' || m.type === 'embedding' ? undefined : (m.family ?? DEFAULT_FAMILY[m.type]),
      aliases: m.aliases,
      deployments,
    }
  })
}

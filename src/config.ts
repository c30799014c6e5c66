import { hashKey, KEY_PREFIX_LENGTH } from './auth/keys.ts'
import { readFileSync } from 'node:fs'
import { z } from 'zod'
import { limitsSchema, resolveLimits, type LimitsConfig } from './billing/config.ts'
import { toPpm, usd, usdRounded } from './billing/money.ts'
import { consoleSchema, resolveConsole, type ConsoleConfig } from './console/config.ts'
import { ConfigError, formatPath } from './errors.ts'
import { filesSchema, resolveFiles, type FilesConfig } from './files/config.ts'
import { resolveServer, serverSchema, type ServerConfig } from './http/config.ts'
import { accountsSchema, type AccountConfig } from './keys/config.ts'
import { predictionsSchema, resolvePredictions, type PredictionsConfig } from './predictions/config.ts'
import { providersSchema, resolveProviders, type ProvidersConfig } from './providers/config.ts'
import {
  modelsSchema,
  resolveModels,
  resolveRouting,
  routingSchema,
  type ModelConfig,
  type RoutingConfig,
} from './routing/config.ts'
import { buildModelTable, ModelNameConflict } from './routing/model-table.ts'
import { checkModelPrices } from './routing/price-check.ts'
import { databaseSchema, resolveDatabase, type DatabaseConfig } from './store/config.ts'

// The only reader of process.env. Each subsystem owns its slice of the config (its schema, its type,
// how its defaults apply) in its own config.ts; this file composes them, reads the environment and
// the config file, and is imported only by the composition root (server.ts, deps.ts, healthcheck.ts),
// which hands each service the slices it uses.

export { ConfigError } from './errors.ts'

export interface Config {
  env: 'production' | 'development' | 'test'
  server: ServerConfig
  limits: LimitsConfig
  /** Admin API key (GATEWAY_ADMIN_KEY); the admin API is off without one. */
  adminKey?: string
  providers: ProvidersConfig
  /** The config file's models only; the built-in catalogue is merged in by the model table. */
  models: ModelConfig[]
  accounts: AccountConfig[]
  /** True when the built-in development account (key `sk-dev`) was added. */
  devAccount: boolean
  files: FilesConfig
  database: DatabaseConfig
  routing: RoutingConfig
  predictions: PredictionsConfig
  /** The browser console at /console (src/console/). */
  console: ConsoleConfig
}

export const DEV_KEY = 'sk-dev'
export const DEV_CREDITS_USD = 100

/** The config file (GATEWAY_CONFIG): one block a slice. */
export const fileSchema = z
  .object({
    server: serverSchema,
    limits: limitsSchema,
    providers: providersSchema,
    models: modelsSchema,
    accounts: accountsSchema,
    files: filesSchema,
    database: databaseSchema,
    routing: routingSchema,
    console: consoleSchema,
    predictions: predictionsSchema,
  })
  .strict()

type FileConfig = z.infer<typeof fileSchema>

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
  GATEWAY_COMPILE_CACHE: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Node's compile cache for `npm start` (`off`: none); NODE_COMPILE_CACHE or `./data/compile-cache` when unset.",
    ),
  NODE_COMPILE_CACHE: z
    .string()
    .min(1)
    .optional()
    .describe(
      "Node's own compile cache directory (set in the image); `npm start` uses it when GATEWAY_COMPILE_CACHE is unset.",
    ),
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

/** The config file GATEWAY_CONFIG names, validated; every block's defaults when it names none. */
function readConfigFile(path: string | undefined, readFile: (path: string) => string): FileConfig {
  if (path === undefined) return fileSchema.parse({})
  let raw: unknown
  try {
    raw = JSON.parse(readFile(path))
  } catch (err) {
    throw new ConfigError(`cannot read GATEWAY_CONFIG (${path}): ${(err as Error).message}`)
  }
  const parsed = fileSchema.safeParse(raw)
  if (!parsed.success) throw new ConfigError(`invalid config file: ${describeZod(parsed.error, '')}`)
  return parsed.data
}

/**
 * The file's accounts, their plain keys hashed; without any, the development account (key `sk-dev`),
 * which production refuses.
 */
function resolveAccounts(
  file: FileConfig['accounts'],
  nodeEnv: Config['env'],
): { accounts: AccountConfig[]; devAccount: boolean } {
  const accounts: AccountConfig[] = file.map((a) => ({
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
  if (accounts.length > 0) return { accounts, devAccount: false }
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
  return { accounts, devAccount: true }
}

/** Every configured price must be chargeable from what its provider reports, or nothing starts. */
function checkPrices(config: Config): void {
  let table
  try {
    table = buildModelTable(config)
  } catch (err) {
    if (err instanceof ModelNameConflict) throw new ConfigError(err.message)
    throw err
  }
  const problems = checkModelPrices(table, (name) => config.providers[name]?.kind)
  if (problems.length > 0) throw new ConfigError(`prices: ${problems.join('\n')}`)
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
  const file = readConfigFile(e.GATEWAY_CONFIG, readFile)

  const nodeEnv = e.NODE_ENV === 'production' ? 'production' : e.NODE_ENV === 'test' ? 'test' : 'development'
  const routing = resolveRouting(file.routing)
  const providers = resolveProviders(file.providers, env, e.MOCK_LATENCY_MS, routing.retry)
  const config: Config = {
    env: nodeEnv,
    server: resolveServer(file.server, {
      host: e.HOST,
      port: e.PORT,
      bodyLimitBytes: e.GATEWAY_BODY_LIMIT_BYTES,
      shutdownGraceMs: e.GATEWAY_SHUTDOWN_GRACE_MS,
      logLevel: e.LOG_LEVEL,
    }),
    limits: resolveLimits(file.limits),
    adminKey: e.GATEWAY_ADMIN_KEY,
    providers,
    models: resolveModels(file.models, providers),
    ...resolveAccounts(file.accounts, nodeEnv),
    files: resolveFiles(file.files, {
      dir: e.GATEWAY_FILES_DIR,
      maxFileBytes: e.GATEWAY_MAX_FILE_BYTES,
      maxFilesPerAccount: e.GATEWAY_MAX_FILES_PER_ACCOUNT,
      maxBytesPerAccount: e.GATEWAY_MAX_FILE_BYTES_PER_ACCOUNT,
      maxInlineBytesPerRequest: e.GATEWAY_MAX_INLINE_FILE_BYTES,
    }),
    database: resolveDatabase(file.database, e.GATEWAY_DATABASE_URL),
    routing,
    predictions: resolvePredictions(file.predictions, {
      outputsDir: e.GATEWAY_OUTPUTS_DIR,
      outputSigningKey: e.GATEWAY_OUTPUT_SIGNING_KEY,
      publicUrl: e.GATEWAY_PUBLIC_URL,
      mockDelayMs: e.MOCK_TASK_DELAY_MS,
    }),
    console: resolveConsole(file.console, {
      enabled: e.GATEWAY_CONSOLE,
      sessionSecret: e.GATEWAY_CONSOLE_SECRET,
    }),
  }
  checkPrices(config)
  return config
}

import { canonicalJson } from './canonical-json.ts'
import type { Logger as PinoLogger } from 'pino'
import { hashKey } from './auth/index.ts'
import { DEV_KEY, type Config } from './config.ts'
import { ids as defaultIds, type Ids } from './ids.ts'
import { everyInterval, startJobs, type BackgroundJob } from './jobs.ts'
import { createLogger } from './logger.ts'
import { createProviderRegistry, type ProviderRegistry } from './providers/registry.ts'
import { buildModelTable, type ModelTable } from './routing/model-table.ts'
import { createRouter, type Router } from './routing/router.ts'
import { createHealth, type Health } from './routing/health.ts'
import { createMetrics, trackSpareHolds, trackStoreStatements, type Metrics } from './metrics.ts'
import { createLocalFileStorage } from './files/local-storage.ts'
import type { FileStorage } from './files/storage.ts'
import { sweepOrphans } from './files/orphan-sweep.ts'
import { createMeteringStats, type MeteringStats } from './billing/metering.ts'
import { createRenewals, type Renewals } from './inference/renewals.ts'
import { createSpareHolds, type SpareHolds } from './billing/spare-holds.ts'
import { toUsd } from './billing/money.ts'
import type { TokenCounter } from './billing/tokens.ts'
import { createTokenThread } from './billing/token-thread.ts'
import { createStore } from './store/create.ts'
import type { Store } from './store/types.ts'
import { createWebhookSecrets, type WebhookSecrets } from './predictions/webhook-secrets.ts'
import type { WebhookSender } from './predictions/webhooks.ts'
import { createPredictionServices } from './predictions/create.ts'
import type { TaskRunner } from './predictions/runner.ts'
import type { Predictions } from './predictions/predictions.ts'
import type { MediaAdapter } from './providers/async-media/types.ts'
import type { ProviderKind } from './domain/models.ts'

const SWEEP_INTERVAL_MS = 60_000
/** Unrecorded file bytes and dead uploads' temp files: a directory listing, so not too often. */
const FILE_SWEEP_INTERVAL_MS = 10 * 60_000
/** An account without a request for this long gets back what this instance held ahead for it. */
const SPARE_IDLE_MS = 10_000

export interface Lifecycle {
  /** Set on SIGTERM: new requests get 503 and /readyz fails while in-flight work finishes. */
  draining: boolean
  /** Requests being answered now: after SIGTERM, server.ts waits for 0 before closing connections. */
  inFlight: number
}

export interface Deps {
  config: Config
  log: PinoLogger
  store: Store
  providers: ProviderRegistry
  models: ModelTable
  router: Router
  /** Circuit breakers and latency averages of this process's deployments. */
  health: Health
  /** Prometheus instruments (GET /metrics). */
  metrics: Metrics
  /** Bytes of uploaded files; their metadata is in store.files. */
  fileStorage: FileStorage
  /** Counts tokens for usage estimates. */
  countTokens: TokenCounter
  stats: MeteringStats
  /** Keeps running requests' reservations alive. */
  renewals: Renewals
  /** Holds taken ahead for busy accounts. */
  spares: SpareHolds
  /** Asynchronous predictions: creation, lookup, cancel; the runner drives them. */
  predictions: Predictions
  runner: TaskRunner
  /** Bytes of the predictions' outputs; their records are in store.outputs. */
  outputStorage: FileStorage
  /** Signs output URLs (the configured key, or one generated once and kept in the store). */
  signingKey: string
  /** The accounts' webhook signing secrets. */
  webhookSecrets: WebhookSecrets
  /** Sends the queued webhook deliveries (started with the runner). */
  webhookSender: WebhookSender
  /** Predictions' housekeeping (run every minute in the background): expired outputs, old tasks. */
  predictionsHousekeeping(): Promise<number>
  now: () => number
  ids: Ids
  lifecycle: Lifecycle
  close(): Promise<void>
}

export interface DepsOverrides {
  log?: PinoLogger
  store?: Store
  now?: () => number
  ids?: Ids
  fileStorage?: FileStorage
  countTokens?: TokenCounter
  outputStorage?: FileStorage
  /** The media capability by provider kind (tests); the built-in ones otherwise. */
  mediaAdapterFor?: (kind: ProviderKind) => MediaAdapter | undefined
  /**
   * False: no background job runs by itself (housekeeping, the task runner, the webhook sender);
   * tests drive them.
   */
  background?: boolean
}

/** Settings made of entries, each entry its own field: one model's discount, one of the rate limits. */
const entrySettings = new Set(['modelDiscountsPpm', 'rateLimits'])

/**
 * An account's settings as fields (`name`, `discountPpm`, `modelDiscountsPpm.<slug>`,
 * `rateLimits.requestsPerMinute`, …). Also reads the applied-config records of earlier versions,
 * which kept the two entry settings whole.
 */
function toFields(settings: Record<string, unknown>): Record<string, unknown> {
  const fields: Record<string, unknown> = {}
  for (const [setting, value] of Object.entries(settings)) {
    if (entrySettings.has(setting) && value !== null && typeof value === 'object') {
      for (const [entry, v] of Object.entries(value)) fields[`${setting}.${entry}`] = v
    } else fields[setting] = value
  }
  return fields
}

/**
 * Accounts of the config file enter the store at start-up. The rule (docs/operators/accounts-and-billing.md): a new account is
 * created with the file's credits as its opening balance and its settings (defaults for those it
 * leaves out); for an existing one, only the fields the file sets (name, discount, each model's
 * discount, each rate limit) are applied, and each only when the file's value changed since the last
 * start, so what the admin API changed survives restarts until the file changes that field. Credits
 * in the file are opening credits only. The file's keys are (re-)added.
 */
async function seedAccounts(config: Config, store: Store, now: number): Promise<void> {
  for (const a of config.accounts) {
    const settings = {
      name: a.name,
      discountPpm: a.discountPpm,
      modelDiscountsPpm: a.modelDiscountsPpm,
      rateLimits: a.rateLimits,
      // Only when the file sets it: otherwise what the admin API set stays.
      ...(a.overdraft === undefined ? {} : { overdraft: a.overdraft }),
    }
    const created = await store.accounts.create({ id: a.id, createdAt: now, ...settings }, a.initialCredits)
    const fromFile = toFields(Object.fromEntries(a.given.map((setting) => [setting, settings[setting]])))
    if (!created) {
      // Without a record of what was applied last (a backend without it, or an account the file just
      // took over), the file's values are applied.
      const last = await store.appliedConfig?.get(a.id)
      const previous = toFields((last ? JSON.parse(last) : {}) as Record<string, unknown>)
      const changed = Object.entries(fromFile).filter(
        ([field, value]) => canonicalJson(previous[field]) !== canonicalJson(value),
      )
      const account = changed.length > 0 ? await store.accounts.get(a.id) : null
      if (account) {
        const patch: Record<string, unknown> = {}
        for (const [field, value] of changed) {
          const dot = field.indexOf('.')
          if (dot < 0) patch[field] = value
          else {
            // One entry of a setting: the account's other entries stay.
            const setting = field.slice(0, dot) as 'modelDiscountsPpm' | 'rateLimits'
            patch[setting] = {
              ...account[setting],
              ...(patch[setting] as object),
              [field.slice(dot + 1)]: value,
            }
          }
        }
        await store.accounts.update(a.id, patch)
      }
    }
    await store.appliedConfig?.set(a.id, canonicalJson(fromFile))
    // The file's webhook secret wins at every start (rotate it there, or leave it out and use the admin API).
    if (a.webhookSecret !== undefined) await createWebhookSecrets(store.secrets).set(a.id, a.webhookSecret)
    const present = new Set((await store.accounts.listKeys(a.id)).map((k) => k.hash))
    for (const key of a.keys) {
      if (present.has(key.sha256)) continue
      await store.accounts.addKey({
        id: `key_${key.sha256.slice(0, 16)}`,
        accountId: a.id,
        hash: key.sha256,
        prefix: key.prefix ?? '',
        createdAt: now,
      })
    }
  }
}

/**
 * The development key exists only while no account is configured: a database first started without
 * accounts keeps `sk-dev` (and its $100), so once accounts are configured (always the case in
 * production) the key is revoked in the store, and that is logged the one time it happens. The `dev`
 * account and its records stay; only a config file that lists the key itself keeps it.
 */
async function revokeDevKey(config: Config, store: Store, log: PinoLogger): Promise<void> {
  if (config.devAccount) return
  const devHash = hashKey(DEV_KEY)
  if (config.accounts.some((a) => a.keys.some((k) => k.sha256 === devHash))) return
  const owner = await store.accounts.findByKeyHash(devHash)
  if (!owner) return
  for (const key of await store.accounts.listKeys(owner.id)) {
    if (key.hash === devHash) await store.accounts.removeKey(owner.id, key.id)
  }
  log.warn(
    { account: owner.id },
    'accounts are configured: the development key sk-dev is revoked (it was left from a start without accounts)',
  )
}

export async function createDeps(config: Config, overrides: DepsOverrides = {}): Promise<Deps> {
  const now = overrides.now ?? Date.now
  const log = overrides.log ?? createLogger(config.server.logLevel)
  const store = overrides.store ?? (await createStore(config.database, { log }))
  await seedAccounts(config, store, now())
  await revokeDevKey(config, store, log)
  const providers = createProviderRegistry(
    { providers: config.providers, predictions: config.predictions },
    { now, mediaAdapterFor: overrides.mediaAdapterFor },
  )
  const models = buildModelTable({ models: config.models, providers: config.providers })
  const health = createHealth(config.routing, now)
  const router = createRouter(models, providers, health)
  for (const m of models.list()) {
    for (const d of m.deployments) {
      if (!d.priced) {
        log.warn(
          { model: m.slug, deployment: d.id },
          'deployment has no price: its generations are billed at 0',
        )
      }
    }
  }
  const fileStorage = overrides.fileStorage ?? createLocalFileStorage(config.files.dir, { now })

  const stats = createMeteringStats()
  // The tokenizer is loaded in its own thread on the first estimate, and dropped when unused.
  const tokenThread = createTokenThread()
  const metrics = createMetrics({ metering: stats })
  if (store.statements) trackStoreStatements(metrics, store.statements)
  const idsUsed = overrides.ids ?? defaultIds
  const tasks = await createPredictionServices({
    config: { predictions: config.predictions, limits: config.limits },
    store,
    providers,
    models,
    log,
    now,
    ids: idsUsed,
    stats,
    metrics,
    router,
    health,
    outputStorage: overrides.outputStorage,
  })
  // Every background job of the instance, started here and stopped by close(), in this order.
  const jobs: BackgroundJob[] = [
    // Expired holds and windows already count for nothing; this frees their space.
    everyInterval('store housekeeping', SWEEP_INTERVAL_MS, () => store.sweep(now()), log),
    everyInterval(
      'file housekeeping',
      FILE_SWEEP_INTERVAL_MS,
      () =>
        sweepOrphans({
          storage: fileStorage,
          files: store.files,
          graceMs: config.files.orphanGraceMs,
          now,
          log,
        }),
      log,
    ),
    ...tasks.jobs,
  ]
  const stopJobs = startJobs(overrides.background === false ? [] : jobs)
  const spares = createSpareHolds(
    { ledger: store.ledger, log, now },
    { max: config.limits.spareHolds, idleMs: SPARE_IDLE_MS, ttlMs: config.limits.reservationTtlMs },
  )
  trackSpareHolds(metrics, () => {
    const { holds, amount } = spares.totals()
    return { holds, usd: toUsd(amount) }
  })
  return {
    config,
    log,
    store,
    providers,
    models,
    router,
    health,
    metrics,
    fileStorage,
    countTokens: overrides.countTokens ?? tokenThread.count,
    stats,
    renewals: createRenewals({ ledger: store.ledger, now, log, ttlMs: config.limits.reservationTtlMs }),
    spares,
    now,
    ids: idsUsed,
    predictions: tasks.predictions,
    runner: tasks.runner,
    outputStorage: tasks.outputStorage,
    signingKey: tasks.signingKey,
    webhookSecrets: tasks.webhookSecrets,
    webhookSender: tasks.sender,
    predictionsHousekeeping: tasks.housekeeping,
    lifecycle: { draining: false, inFlight: 0 },
    async close() {
      await stopJobs()
      // Before the store closes: what was held ahead is given back, not left to its TTL.
      await spares.close()
      await providers.close()
      await tokenThread.close()
      await store.close()
    },
  }
}

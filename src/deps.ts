import type { Logger as PinoLogger } from 'pino'
import type { Config } from './config.ts'
import { ids as defaultIds, type Ids } from './ids.ts'
import { createLogger } from './logger.ts'
import { createProviderRegistry, type ProviderRegistry } from './providers/registry.ts'
import { buildModelTable, type ModelTable } from './routing/model-table.ts'
import { createRouter, type Router } from './routing/router.ts'
import { createHealth, type Health } from './routing/health.ts'
import { createMetrics, type Metrics } from './metrics.ts'
import { createLocalFileStorage } from './files/local-storage.ts'
import type { FileStorage } from './files/storage.ts'
import { sweepOrphans } from './files/orphan-sweep.ts'
import { createMeteringStats, type MeteringStats } from './billing/metering.ts'
import { createRenewals, type Renewals } from './inference/renewals.ts'
import { countTokens, type TokenCounter } from './billing/tokens.ts'
import { createStore } from './store/create.ts'
import type { Store } from './store/types.ts'
import { hostname } from 'node:os'
import { randomBytes } from 'node:crypto'
import { createWebhookSecrets, type WebhookSecrets } from './tasks/webhook-secrets.ts'
import { checkUrl, resolveAllowed } from './http/address-guard.ts'
import { safeRequest } from './http/safe-fetch.ts'
import { buildDelivery, createWebhookSender, type WebhookSender } from './tasks/webhooks.ts'
import { GatewayError } from './errors.ts'
import { createOutputKeeper, newSigningKey, outputUrl } from './tasks/outputs.ts'
import { createTaskRunner, type MediaProvider, type TaskRunner } from './tasks/runner.ts'
import { createPredictions, type Predictions } from './tasks/predictions.ts'
import { settleTask } from './tasks/billing.ts'
import { toPredictionBody } from './tasks/body.ts'
import type { MediaAdapter, MediaTools } from './providers/async-media/types.ts'
import { mediaAdapterFor } from './providers/async-media/registry.ts'
import type { TaskRecord } from './store/tasks.ts'

const SWEEP_INTERVAL_MS = 60_000
/** How often each instance looks for webhook deliveries that are due. */
const WEBHOOK_TICK_MS = 500
/** Downloading one client-given media URL (a first frame, a reference image) for an upstream. */
const USER_MEDIA_TIMEOUT_MS = 30_000
/** Unrecorded file bytes and dead uploads' temp files: a directory listing, so not too often. */
const FILE_SWEEP_INTERVAL_MS = 10 * 60_000

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
  /** Media adapters by provider kind (tests); the built-in ones otherwise. */
  mediaAdapterFor?: (kind: string) => MediaAdapter | undefined
  /** False: the task runner, webhook sender and housekeeping do not run by themselves (tests drive them). */
  background?: boolean
}

/** JSON with object keys sorted, so equal values compare equal as text. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : v,
  )
}

/**
 * Accounts of the config file enter the store at start-up. The rule (README, Storage): a new account is
 * created with the file's credits as its opening balance; for an existing one, each field the file
 * sets (name, discount, model discounts, rate limits) is applied only when the file's value changed
 * since the last start, so what the admin API changed survives restarts until the file changes that
 * field. Credits in the file are opening credits only. The file's keys are (re-)added.
 */
async function seedAccounts(config: Config, store: Store, now: number): Promise<void> {
  for (const a of config.accounts) {
    const fromFile = {
      name: a.name,
      discountPpm: a.discountPpm,
      modelDiscountsPpm: a.modelDiscountsPpm,
      rateLimits: a.rateLimits,
    }
    const created = await store.accounts.create({ id: a.id, createdAt: now, ...fromFile }, a.initialCredits)
    if (!created) {
      // Without a record of what was applied last (a backend without it, or an account the file just
      // took over), the file's values are applied.
      const last = await store.appliedConfig?.get(a.id)
      const previous = (last ? JSON.parse(last) : {}) as Record<string, unknown>
      const patch = Object.fromEntries(
        Object.entries(fromFile).filter(([field, value]) => canonical(previous[field]) !== canonical(value)),
      )
      if (Object.keys(patch).length > 0) await store.accounts.update(a.id, patch)
    }
    await store.appliedConfig?.set(a.id, canonical(fromFile))
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

export async function createDeps(config: Config, overrides: DepsOverrides = {}): Promise<Deps> {
  const now = overrides.now ?? Date.now
  const log = overrides.log ?? createLogger(config.server.logLevel)
  const store = overrides.store ?? (await createStore(config.database, { log }))
  await seedAccounts(config, store, now())
  const providers = createProviderRegistry(config, { now })
  const models = buildModelTable(config)
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
  // Housekeeping: expired holds and windows already count for nothing; this frees their space.
  const sweeper = setInterval(() => {
    store.sweep(now()).catch((err: unknown) => log.warn({ err }, 'store housekeeping failed'))
  }, SWEEP_INTERVAL_MS)
  sweeper.unref()
  const fileStorage = overrides.fileStorage ?? createLocalFileStorage(config.files.dir, { now })
  const fileSweeper = setInterval(() => {
    sweepOrphans({
      storage: fileStorage,
      files: store.files,
      graceMs: config.files.orphanGraceMs,
      now,
      log,
    }).catch((err: unknown) => log.warn({ err }, 'file housekeeping failed'))
  }, FILE_SWEEP_INTERVAL_MS)
  fileSweeper.unref()

  // Predictions (tasks/).
  const p = config.predictions
  const owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`
  const outputStorage = overrides.outputStorage ?? createLocalFileStorage(p.outputsDir, { now })
  const signingKey =
    p.outputSigningKey ?? (await store.secrets.getOrCreate('output-url-signing-key', newSigningKey))
  const adapterOf =
    overrides.mediaAdapterFor ??
    ((kind: string) => mediaAdapterFor(kind, { now, mockDelayMs: p.mockDelayMs }))
  const mediaProviders = new Map<string, MediaProvider | undefined>()
  const providerFor = (name: string): MediaProvider | undefined => {
    if (!mediaProviders.has(name)) {
      const provider = providers.get(name)
      const adapter = provider && adapterOf(provider.config.kind)
      mediaProviders.set(
        name,
        provider && adapter
          ? { adapter, call: { upstream: provider.config, dispatcher: provider.dispatcher } }
          : undefined,
      )
    }
    return mediaProviders.get(name)
  }
  // Webhooks and client-given media URLs follow the same address rules (decisions.md, Webhooks).
  const addressPolicy = { allowHttp: p.webhooks.allowHttp, allowedHosts: p.webhooks.allowedHosts }
  const tools: MediaTools = {
    ffmpegPath: p.ffmpegPath,
    maxOutputBytes: p.maxOutputBytes,
    async fetchUserMedia(raw, signal) {
      const res = await safeRequest(checkUrl(raw, addressPolicy, 'input'), {
        method: 'GET',
        headers: { accept: 'image/*, video/*, audio/*' },
        timeoutMs: USER_MEDIA_TIMEOUT_MS,
        maxBytes: p.maxOutputBytes,
        policy: addressPolicy,
        signal,
      })
      if (res.status < 200 || res.status > 299) {
        throw new GatewayError('upstream_invalid_request', `an input media URL answered ${res.status}`)
      }
      const type = res.headers['content-type']
      return {
        data: res.body,
        contentType: (Array.isArray(type) ? type[0] : type) ?? 'application/octet-stream',
      }
    },
  }
  const webhookSecrets = createWebhookSecrets(store.secrets)
  const stats = createMeteringStats()
  const metering = { store, config, log, stats, models, now }
  const keeper = createOutputKeeper({
    storage: outputStorage,
    outputs: store.outputs,
    tasks: store.tasks,
    now,
    log,
    retentionMs: p.outputRetentionMs,
    maxBytes: p.maxOutputBytes,
  })
  const idsUsed = overrides.ids ?? defaultIds
  async function announce(task: TaskRecord): Promise<void> {
    if (task.webhook === null) return
    const record = await store.generations.get(task.id)
    const body = toPredictionBody(
      task,
      record,
      (id) => outputUrl(signingKey, task.origin, id, now(), p.outputUrlTtlMs),
      idsUsed.request(),
    )
    await store.webhooks.enqueue(
      buildDelivery(task, task.webhook, JSON.stringify(body), 'task.finished', now()),
    )
    log.info({ taskId: task.id }, 'webhook queued')
  }
  const sender = createWebhookSender({
    store: store.webhooks,
    secrets: webhookSecrets,
    config: p.webhooks,
    now,
    log,
    owner,
    leaseMs: p.leaseMs,
  })
  const runner = createTaskRunner({
    tasks: store.tasks,
    keeper,
    providerFor,
    tools,
    config: p,
    now,
    log,
    owner,
    settle: (task, end) => settleTask(metering, task, end),
    announce,
  })
  const predictions = createPredictions({
    store,
    models,
    config,
    log,
    stats,
    now,
    ids: idsUsed,
    servesMedia: (name) => providerFor(name) !== undefined,
    async checkWebhook(raw) {
      // At creation, and again at every delivery (tasks/webhooks.ts) on the address actually connected to.
      await resolveAllowed(checkUrl(raw, addressPolicy, 'webhook'), addressPolicy, undefined, 'webhook')
    },
    wake: () => runner.wake(),
    announce,
    signingKey,
  })
  const background = overrides.background ?? true
  let outputSweeper: NodeJS.Timeout | undefined
  if (background) {
    runner.start(Math.min(p.pollIntervalMs, 500))
    sender.start(WEBHOOK_TICK_MS)
    outputSweeper = setInterval(() => {
      keeper.sweep(p.taskRetentionMs).catch((err: unknown) => log.warn({ err }, 'output housekeeping failed'))
    }, SWEEP_INTERVAL_MS)
    outputSweeper.unref()
  }
  return {
    config,
    log,
    store,
    providers,
    models,
    router,
    health,
    metrics: createMetrics(),
    fileStorage,
    countTokens: overrides.countTokens ?? countTokens,
    stats,
    renewals: createRenewals({ ledger: store.ledger, now, log, ttlMs: config.limits.reservationTtlMs }),
    now,
    ids: idsUsed,
    predictions,
    runner,
    outputStorage,
    signingKey,
    webhookSecrets,
    webhookSender: sender,
    lifecycle: { draining: false, inFlight: 0 },
    async close() {
      clearInterval(sweeper)
      clearInterval(fileSweeper)
      clearInterval(outputSweeper)
      await runner.stop()
      await sender.stop()
      await providers.close()
      await store.close()
    },
  }
}

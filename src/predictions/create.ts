import { randomBytes } from 'node:crypto'
import { hostname } from 'node:os'
import type { Logger } from 'pino'
import type { MeteringStats } from '../billing/metering.ts'
import type { Metrics } from '../metrics.ts'
import type { LimitsConfig } from '../billing/config.ts'
import type { PredictionsConfig } from './config.ts'
import { GatewayError } from '../errors.ts'
import { createLocalFileStorage } from '../files/local-storage.ts'
import type { FileStorage } from '../files/storage.ts'
import { checkUrl, resolveAllowed } from '../http/address-guard.ts'
import { safeRequest } from '../http/safe-fetch.ts'
import type { Ids } from '../ids.ts'
import { everyInterval, type BackgroundJob } from '../jobs.ts'
import type { MediaTools } from '../providers/async-media/types.ts'
import type { MediaProvider, ProviderRegistry } from '../providers/registry.ts'
import type { Health } from '../routing/health.ts'
import type { ModelTable } from '../routing/model-table.ts'
import type { Router } from '../routing/router.ts'
import type { Store } from '../store/types.ts'
import type { TaskRecord } from '../domain/tasks.ts'
import { settleTask } from './billing.ts'
import { toPredictionBody } from '../schemas/prediction-body.ts'
import { newSigningKey, outputUrl } from '../auth/index.ts'
import { createOutputKeeper } from './outputs.ts'
import { createPredictions, type Predictions } from './predictions.ts'
import { createTaskRunner, type TaskRunner } from './runner.ts'
import { createWebhookSecrets, type WebhookSecrets } from './webhook-secrets.ts'
import { buildDelivery, createWebhookSender, type WebhookSender } from './webhooks.ts'

// The predictions' parts wired together (createDeps calls this): the API side, the task runner, the
// webhook sender and the output housekeeping, all on the one store, so any instance can carry on
// what another started.

/** How often each instance looks for webhook deliveries that are due. */
const WEBHOOK_TICK_MS = 500
/** Expired outputs and old tasks: deleted in the background. */
const SWEEP_INTERVAL_MS = 60_000
/** Downloading one client-given media URL (a first frame, a reference image) for an upstream. */
const USER_MEDIA_TIMEOUT_MS = 30_000

export interface PredictionServicesDeps {
  config: { predictions: PredictionsConfig; limits: LimitsConfig }
  store: Store
  providers: ProviderRegistry
  models: ModelTable
  log: Logger
  now: () => number
  ids: Ids
  stats: MeteringStats
  /** Unbilled overage of tasks is counted here. */
  metrics?: Metrics
  /** The chat's router and breakers: predictions are routed and judged the same way. */
  router: Router
  health: Health
  /** Tests: where outputs go. */
  outputStorage?: FileStorage
}

export interface PredictionServices {
  predictions: Predictions
  runner: TaskRunner
  sender: WebhookSender
  outputStorage: FileStorage
  signingKey: string
  webhookSecrets: WebhookSecrets
  /** Deletes expired outputs (records and bytes) and finished tasks past their retention. */
  housekeeping(): Promise<number>
  /**
   * The runner, the sender and the output housekeeping, for createDeps' list of background jobs.
   * Stopping the runner aborts its polls (their tasks are freed for the next run) and waits for them.
   */
  jobs: BackgroundJob[]
}

export async function createPredictionServices(d: PredictionServicesDeps): Promise<PredictionServices> {
  const { config, store, log, now } = d
  const p = config.predictions
  const owner = `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`
  const outputStorage = d.outputStorage ?? createLocalFileStorage(p.outputsDir, { now })
  const signingKey =
    p.outputSigningKey ?? (await store.secrets.getOrCreate('output-url-signing-key', newSigningKey))
  const providerFor = (name: string): MediaProvider | undefined => {
    const provider = d.providers.get(name)
    return provider?.media ? { ...provider, media: provider.media } : undefined
  }

  // Webhooks and client-given media URLs follow the same address rules (docs/design/decisions.md, Webhooks).
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
  const metering = { store, config, log, stats: d.stats, metrics: d.metrics, models: d.models, now }
  const keeper = createOutputKeeper({
    storage: outputStorage,
    outputs: store.outputs,
    tasks: store.tasks,
    now,
    log,
    retentionMs: p.outputRetentionMs,
    maxBytes: p.maxOutputBytes,
  })

  /** Queues the webhook of a task that ended: the body a lookup would show now. */
  async function announce(task: TaskRecord): Promise<void> {
    if (task.webhook === null) return
    const record = await store.generations.get(task.id)
    const body = toPredictionBody(
      task,
      record,
      (id) => outputUrl(signingKey, task.origin, id, now(), p.outputUrlTtlMs),
      d.ids.request(),
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
    submitCandidates(task) {
      const model = d.models.get(task.model)
      return model ? d.router.mediaCandidates(model) : []
    },
    health: d.health,
    metrics: d.metrics,
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
    models: d.models,
    config,
    log,
    stats: d.stats,
    now,
    ids: d.ids,
    router: d.router,
    async checkWebhook(raw) {
      // At creation, and again at every delivery (predictions/webhooks.ts) on the address actually connected to.
      await resolveAllowed(checkUrl(raw, addressPolicy, 'webhook'), addressPolicy, undefined, 'webhook')
    },
    wake: () => runner.wake(),
    announce,
    signingKey,
  })

  return {
    predictions,
    runner,
    sender,
    outputStorage,
    signingKey,
    webhookSecrets,
    housekeeping: () => keeper.sweep(p.taskRetentionMs),
    jobs: [
      {
        name: 'task runner',
        start() {
          runner.start(Math.min(p.pollIntervalMs, 500))
          return () => runner.stop()
        },
      },
      {
        name: 'webhook sender',
        start() {
          sender.start(WEBHOOK_TICK_MS)
          return () => sender.stop()
        },
      },
      everyInterval('output housekeeping', SWEEP_INTERVAL_MS, () => keeper.sweep(p.taskRetentionMs), log),
    ],
  }
}

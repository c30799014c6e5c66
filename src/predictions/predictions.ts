import { canonicalJson } from '../canonical-json.ts'
import { createHash } from 'node:crypto'
import type { Logger } from 'pino'
import { release, type MeteringStats } from '../billing/metering.ts'
import type { LimitsConfig } from '../billing/config.ts'
import type { PredictionsConfig } from './config.ts'
import { GatewayError, invalidRequest } from '../errors.ts'
import type { Ids } from '../ids.ts'
import { owned } from '../owned.ts'
import { holdGeneration } from '../inference/generation.ts'
import type { ModelTable } from '../routing/model-table.ts'
import type { ServedModel } from '../domain/models.ts'
import type { MediaCandidate, Router } from '../routing/router.ts'
import { familyKind, parseMediaInput, parsePredictionRequest } from '../schemas/predictions.ts'
import type { Store } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import type { TaskRecord } from '../domain/tasks.ts'
import { taskCostBound } from './billing.ts'
import { toPredictionBody, type PredictionBody } from '../schemas/prediction-body.ts'
import { outputUrl } from '../auth/index.ts'
import type { JsonValue } from '../domain/media.ts'

// Creating, reading and cancelling predictions (routes/predictions.ts is the HTTP side). Creation
// checks everything before anything reaches an upstream (model, input rules, webhook address), routes
// the task as chat is routed (the model's strategy, without deployments whose breaker is open), holds
// the price of its dearest candidate (402 when the account has nothing left), stores the task on the
// first candidate and wakes the runner, which may still move it to the next one while no upstream has
// accepted it (runner.ts).

/** docs/design/decisions.md: a repeat with the same Idempotency-Key within 24 h returns the first task. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3_600_000
/** A task's hold outlives its longest run by this, so the runner that ends it still finds it. */
const HOLD_MARGIN_MS = 10 * 60_000

export interface PredictionsDeps {
  store: Store
  models: ModelTable
  config: { predictions: PredictionsConfig; limits: LimitsConfig }
  log: Logger
  stats: MeteringStats
  now: () => number
  ids: Ids
  /** Orders a media model's deployments and leaves out those out of rotation (as for chat). */
  router: Pick<Router, 'routeMedia'>
  /** Refuses (400, param `webhook`) an address the gateway must not call (docs/design/decisions.md, Webhooks). */
  checkWebhook(url: string): Promise<void>
  /** The runner: a new task is due at once. */
  wake(): void
  /** Queues the task's webhook with its final state (a cancelled task). */
  announce(task: TaskRecord): Promise<void>
  /** Signs output URLs. */
  signingKey: string
}

export interface CreateOptions {
  idempotencyKey?: string
  /** Origin of the creating request, for the output URLs of the webhook when no public URL is set. */
  origin: string
  /** The requests-per-minute limit already counted this request (before its body was read). */
  requestCounted?: boolean
  /**
   * The key it is made with: its models and limits apply, and its hold names it, so the task's
   * settlement (built from the task, later) is charged to the key too.
   */
  key?: ApiKeyRecord
}

export interface Predictions {
  create(account: Account, body: unknown, options: CreateOptions): Promise<TaskRecord>
  /** The account's task, or 404 `prediction_not_found` (also for another account's). */
  get(account: Account, id: string): Promise<TaskRecord>
  /** Cancels a processing task; 409 `invalid_state` for a finished one. */
  cancel(account: Account, id: string): Promise<TaskRecord>
  /** The lookup body; output URLs on `origin`, valid for the configured time from now. */
  body(task: TaskRecord, origin: string, requestId: string): Promise<PredictionBody>
}

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/

const notFound = (id: string) =>
  new GatewayError('prediction_not_found', `prediction ${id} not found`, { param: 'prediction_id' })

/** The first task of an Idempotency-Key, for a repeat of its request; 409 for another body. */
function repeatOf(task: TaskRecord, requestHash: string | null): TaskRecord {
  if (task.requestHash !== requestHash) {
    throw new GatewayError(
      'idempotency_key_reused',
      'this Idempotency-Key was used with a different request body in the last 24 hours',
      { param: 'Idempotency-Key' },
    )
  }
  return task
}

/** A creation request checked before anything is held or stored. */
interface CheckedCreation {
  req: ReturnType<typeof parsePredictionRequest>
  model: ServedModel
  family: NonNullable<ServedModel['family']>
  media: ReturnType<typeof parseMediaInput>
  /** The SHA-256 of the request's body when it has an Idempotency-Key, else null. */
  requestHash: string | null
}

/** Checks a creation's body and Idempotency-Key: model, input rules, its function; 400/404 otherwise. */
function checkCreation(
  d: PredictionsDeps,
  raw: unknown,
  idempotencyKey: string | undefined,
): CheckedCreation {
  const req = parsePredictionRequest(raw)
  const model = d.models.get(req.model)
  if (!model) throw new GatewayError('model_not_found', `model ${req.model} not found`, { param: 'model' })
  if (model.family === undefined) {
    throw invalidRequest(
      'invalid_value',
      `model ${req.model} is a ${model.type} model; predictions take image, video and speech models`,
      'model',
    )
  }
  const kind = familyKind[model.family]
  if (req.function !== undefined && req.function !== kind) {
    throw invalidRequest('invalid_value', `model ${req.model} makes ${kind}, not ${req.function}`, 'function')
  }
  const media = parseMediaInput(model.family, req.input)
  if (idempotencyKey !== undefined && !IDEMPOTENCY_KEY.test(idempotencyKey)) {
    throw invalidRequest(
      'invalid_value',
      'Idempotency-Key must be 1 to 255 printable ASCII characters',
      'Idempotency-Key',
    )
  }
  const requestHash =
    idempotencyKey === undefined
      ? null
      : createHash('sha256')
          .update(
            canonicalJson({
              model: req.model,
              input: req.input,
              webhook: req.webhook ?? null,
              function: req.function ?? null,
            }),
          )
          .digest('hex')
  return { req, model, family: model.family, media, requestHash }
}

/** Holds the price of the dearest candidate: whichever ends up taking the task, its price is covered. */
async function holdTask(
  d: PredictionsDeps,
  account: Account,
  c: CheckedCreation,
  candidates: MediaCandidate[],
  id: string,
  now: number,
  options: CreateOptions,
): Promise<void> {
  let costBound = 0n
  for (const x of candidates) {
    const bound = taskCostBound(c.media, x.deployment.price)
    if (bound > costBound) costBound = bound
  }
  await holdGeneration(d, {
    account,
    key: options.key,
    holdKey: true,
    slug: c.model.slug,
    deployments: candidates.map((x) => x.deployment),
    generationId: id,
    costBound,
    tokenEstimate: 0,
    ttlMs: d.config.predictions.maxTaskMs + HOLD_MARGIN_MS,
    now,
    requestCounted: options.requestCounted,
  })
}

/** A new task, due now, stored on the first candidate. */
function newTask(
  d: PredictionsDeps,
  account: Account,
  c: CheckedCreation,
  first: MediaCandidate,
  id: string,
  now: number,
  options: CreateOptions,
): TaskRecord {
  const p = d.config.predictions
  return {
    id,
    accountId: account.id,
    model: c.model.slug,
    family: c.family,
    provider: first.deployment.provider,
    deployment: first.deployment.id,
    upstreamModel: first.deployment.upstreamModel,
    input: c.media.input as unknown as JsonValue,
    webhook: c.req.webhook ?? null,
    origin: p.publicUrl ?? options.origin,
    status: 'processing',
    upstreamState: null,
    cancelUpstream: false,
    outputs: [],
    error: null,
    createdAt: now,
    updatedAt: now,
    deadlineAt: now + p.maxTaskMs,
    nextRunAt: now,
    runs: 0,
    leaseOwner: '',
    leaseUntil: 0,
    idempotencyKey: options.idempotencyKey ?? null,
    requestHash: c.requestHash,
    submitStartedAt: null,
  }
}

async function createTask(
  d: PredictionsDeps,
  account: Account,
  raw: unknown,
  options: CreateOptions,
): Promise<TaskRecord> {
  const c = checkCreation(d, raw, options.idempotencyKey)
  if (options.idempotencyKey !== undefined) {
    // A retry is answered from its task before admission: the first task's hold may be what uses
    // the balance now, and a retry must not get 402 for it (nor hold the price twice).
    const existing = await d.store.tasks.findByIdempotencyKey(
      account.id,
      options.idempotencyKey,
      d.now() - IDEMPOTENCY_WINDOW_MS,
    )
    if (existing) return repeatOf(existing, c.requestHash)
  }
  if (c.req.webhook !== undefined) await d.checkWebhook(c.req.webhook)
  const candidates = d.router.routeMedia(c.model)
  const first = candidates[0] as MediaCandidate

  const now = d.now()
  const id = d.ids.request()
  await holdTask(d, account, c, candidates, id, now, options)
  const task = newTask(d, account, c, first, id, now, options)
  let stored: { task: TaskRecord; created: boolean }
  try {
    stored = await d.store.tasks.create(task, now - IDEMPOTENCY_WINDOW_MS)
  } catch (err) {
    await release(d, { id, accountId: account.id }, 0, d.now())
    throw err
  }
  if (!stored.created) {
    // A repeat that raced the first create: nothing new starts and nothing new is held.
    await release(d, { id, accountId: account.id }, 0, d.now())
    return repeatOf(stored.task, c.requestHash)
  }
  d.log.info({ taskId: id, model: c.model.slug, provider: first.deployment.provider }, 'task created')
  d.wake()
  return stored.task
}

async function getTask(d: PredictionsDeps, account: Account, id: string): Promise<TaskRecord> {
  // Ids are 32 hex: anything else is unknown without asking the store.
  const task = /^[0-9a-f]{32}$/.test(id) ? await d.store.tasks.get(id) : null
  return owned(account.id, task, () => notFound(id))
}

async function cancelTask(d: PredictionsDeps, account: Account, id: string): Promise<TaskRecord> {
  const before = await getTask(d, account, id)
  if (before.status !== 'processing') {
    throw new GatewayError(
      'invalid_state',
      `prediction ${id} is ${before.status}; only a processing task can be cancelled`,
    )
  }
  const after = owned(account.id, await d.store.tasks.cancel(account.id, id, d.now()), () => notFound(id))
  if (after.status !== 'cancelled') {
    throw new GatewayError(
      'invalid_state',
      `prediction ${id} is ${after.status}; only a processing task can be cancelled`,
    )
  }
  await release(d, { id, accountId: account.id }, 0, d.now())
  await d.announce(after)
  // The runner cancels the upstream job, where there is one.
  if (after.cancelUpstream) d.wake()
  d.log.info({ taskId: id }, 'task cancelled')
  return after
}

export function createPredictions(d: PredictionsDeps): Predictions {
  return {
    create: (account, body, options) => createTask(d, account, body, options),
    get: (account, id) => getTask(d, account, id),
    cancel: (account, id) => cancelTask(d, account, id),
    async body(task, origin, requestId) {
      const record = task.status === 'processing' ? null : await d.store.generations.get(task.id)
      const now = d.now()
      const ttl = d.config.predictions.outputUrlTtlMs
      return toPredictionBody(
        task,
        record,
        (outId) => outputUrl(d.signingKey, origin, outId, now, ttl),
        requestId,
      )
    },
  }
}

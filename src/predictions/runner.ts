import type { Logger } from 'pino'
import type { PredictionsConfig } from './config.ts'
import { toGatewayError, UpstreamError } from '../errors.ts'
import type {
  MediaAdapter,
  MediaCall,
  MediaJob,
  MediaResult,
  MediaStep,
  MediaTools,
} from '../providers/async-media/types.ts'
import type { Metrics } from '../metrics.ts'
import type { MediaProvider } from '../providers/registry.ts'
import type { UpstreamCall } from '../providers/types.ts'
import { healthKey, type Health } from '../routing/health.ts'
import type { MediaCandidate } from '../routing/router.ts'
import type { TaskPatch, TaskStore } from '../store/types.ts'
import type { AttemptRecord } from '../domain/records.ts'
import type { TaskError, TaskRecord } from '../domain/tasks.ts'
import type { OutputKeeper } from './outputs.ts'
import type { JsonValue } from '../domain/media.ts'
import type { BillableUsage } from '../domain/prices.ts'

// Drives prediction tasks to their end. Tasks live in the store, never only here: the runner of any
// instance leases the tasks that are due (TaskStore.claimDue), does one step of each (submit to the
// upstream, or poll it, or cancel it there) and writes the result back, freeing the lease. An
// instance that dies mid-step simply stops holding its leases; another instance (or this one after a
// restart) takes the task over when the lease runs out and repeats the step.
//
// A finished task is settled and its webhook queued BEFORE its status is written: both are idempotent
// per task id (one generation record, one delivery id), so a crash in between repeats them harmlessly,
// while the opposite order could leave a finished task unbilled or unannounced.
//
// Routing, as for chat: a task not yet accepted upstream is offered to its own deployment first, then
// to the model's other deployments in their routing order, skipping those whose circuit breaker is
// open. A submit the upstream certainly turned away (429, a refused connection) moves the task to the
// next deployment in the same step; once an upstream accepts it, the task stays there (its polls and
// cancel go to that deployment only). Every submit and poll is reported to the deployment's breaker.
//
// Every submit, and every poll that failed, is kept on the task (`attempts`, in order) and becomes its
// generation record's `attempts`, as chat's upstream calls do: which deployments were tried, and how.
//
// The pieces, each a function of its own: the task's writes (`advance`, `retryLater`, `finish`), the
// upstream calls (`submit`, `poll`, `cancelUpstream`) and what their answers make of the task
// (`stepDone`, `stepFailed`), one step of a task (`runStep`), and the scheduler that leases due
// tasks into free slots (`claim`, `createTicker`). `createTaskRunner` only composes them.

export interface TaskEnd {
  /** What the upstream billed: the task's price for a success, or a failed job the upstream charged. */
  billed: BillableUsage | null
  endedAt: number
}

export interface RunnerDeps {
  tasks: TaskStore
  keeper: OutputKeeper
  /** The configured provider `name` when it makes media: polls and cancels of its tasks go there. */
  providerFor(name: string): MediaProvider | undefined
  /**
   * Where a task no upstream accepted yet may be submitted: every media-capable deployment of its
   * model in routing order, breakers not consulted (the runner asks them); empty when none serves it.
   */
  submitCandidates(task: TaskRecord): MediaCandidate[]
  /** The deployments' circuit breakers (the chat's): a submit asks first, every call reports. */
  health: Pick<Health, 'tryAcquire' | 'success' | 'failure' | 'neutral'>
  /** Failed submits and polls are counted here, as chat's failed calls are. */
  metrics?: Pick<Metrics, 'upstreamErrors'>
  tools: MediaTools
  config: PredictionsConfig
  now: () => number
  log: Logger
  /** This instance's name in leases. */
  owner: string
  /** Charges (settles) or releases the task's reservation; idempotent per task. */
  settle(task: TaskRecord, end: TaskEnd): Promise<void>
  /** Queues the task's webhook (when it has one) with its final state; idempotent per task. */
  announce(task: TaskRecord): Promise<void>
}

export interface TaskRunner {
  /** Claims the due tasks and runs one step of each; resolves when those steps are done. */
  runOnce(): Promise<number>
  /** Runs due tasks every `tickMs` until `stop`. */
  start(tickMs: number): void
  /** Looks for due tasks now (a task was just created). */
  wake(): void
  /**
   * Stops claiming, aborts the polls and cancels in flight (their tasks are freed for the next run)
   * and waits for them; a submit in flight is waited for, not cut (at most 80 % of the lease).
   */
  stop(): Promise<void>
}

/** The wait before poll `runs + 1`: doubling from `pollIntervalMs` up to `maxPollIntervalMs`. */
export function pollDelay(
  runs: number,
  config: Pick<PredictionsConfig, 'pollIntervalMs' | 'maxPollIntervalMs'>,
) {
  return Math.min(config.pollIntervalMs * 2 ** Math.min(runs, 30), config.maxPollIntervalMs)
}

/** Network errors of the connect phase: the request never left, so no upstream job can exist. */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
])

/**
 * Whether a failed submit certainly left no job upstream: refused at connect (the request was never
 * sent) or answered 429 (the upstream turned it away). A timeout, a reset or a 5xx may come after
 * the upstream accepted the job, which a repeat would start (and bill) a second time.
 */
export function submitNotAccepted(err: unknown): boolean {
  if (err instanceof UpstreamError && err.upstreamStatus === 429) return true
  let e: unknown = err
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string' && NOT_SENT_CODES.has(code)) return true
    // Several addresses tried (happy eyeballs): refused only when every one was.
    if (e instanceof AggregateError && e.errors.length > 0) return e.errors.every((x) => submitNotAccepted(x))
    e = (e as { cause?: unknown }).cause
  }
  return false
}

/** Where a task runs: written with the task's next state, since a submit may have moved it. */
function placement(t: Pick<TaskRecord, 'provider' | 'deployment' | 'upstreamModel'>) {
  return { provider: t.provider, deployment: t.deployment, upstreamModel: t.upstreamModel }
}

export function toJob(t: TaskRecord): MediaJob {
  return {
    family: t.family,
    input: t.input,
    taskId: t.id,
    upstreamModel: t.upstreamModel,
  } as MediaJob
}

/** What every piece of a runner works with: its deps and the signal of this instance stopping. */
interface Runner {
  d: RunnerDeps
  stopping: AbortSignal
}

function callFor(r: Runner, p: MediaProvider, t: TaskRecord, signal: AbortSignal): MediaCall {
  return {
    upstream: p.config,
    dispatcher: p.dispatcher,
    upstreamModel: t.upstreamModel,
    signal,
    log: r.d.log.child({ taskId: t.id, provider: t.provider }) as unknown as UpstreamCall['log'],
    media: r.d.tools,
  }
}

/**
 * Tells the breaker of `key` how an upstream call failed, as chat's attempts do: a failure another
 * call may not share (5xx, timeout, connection) counts against it; a 429, the request's own fault,
 * the gateway's own fault or this step being cut says nothing of its health.
 */
function reportFailure(
  d: RunnerDeps,
  key: string,
  provider: string,
  err: unknown,
  signal: AbortSignal,
  acquired: boolean,
): void {
  const e = toGatewayError(err)
  const status = err instanceof UpstreamError ? err.upstreamStatus : null
  if (!signal.aborted) d.metrics?.upstreamErrors.inc({ provider, code: e.code })
  if (!signal.aborted && e.retryable && status !== 429) d.health.failure(key)
  else if (acquired) d.health.neutral(key)
}

/** `t` with one more upstream call kept: `err` absent for a call that answered. */
function withAttempt(t: TaskRecord, startedAt: number, endedAt: number, err?: unknown): TaskRecord {
  const attempt: AttemptRecord = {
    provider: t.provider,
    deployment: t.deployment,
    model: t.model,
    status: err === undefined ? 200 : err instanceof UpstreamError ? err.upstreamStatus : null,
    outcome: err === undefined ? 'ok' : toGatewayError(err).code,
    startedAt,
    durationMs: endedAt - startedAt,
  }
  return { ...t, attempts: [...(t.attempts ?? []), attempt] }
}

/**
 * Writes `patch` as the task's next state (with the upstream calls kept on `t`) and frees the lease;
 * false when a cancel came first.
 */
async function advance(d: RunnerDeps, t: TaskRecord, patch: TaskPatch): Promise<boolean> {
  const kept = t.attempts === undefined ? {} : { attempts: t.attempts }
  const after = await d.tasks.advance(t.id, d.owner, t.status, { updatedAt: d.now(), ...kept, ...patch })
  return after !== null
}

/** Tries the step again later, with the poll's backoff (at once when this instance is stopping). */
async function retryLater(r: Runner, t: TaskRecord, patch: TaskPatch = {}): Promise<void> {
  await advance(r.d, t, {
    runs: t.runs + 1,
    nextRunAt: r.d.now() + (r.stopping.aborted ? 0 : pollDelay(t.runs, r.d.config)),
    ...patch,
  })
}

async function finish(d: RunnerDeps, t: TaskRecord, final: TaskRecord, billed: BillableUsage | null) {
  // A cancel may have come in while the upstream worked: the client's word wins, nothing is billed.
  const current = await d.tasks.get(t.id)
  if (!current || current.status !== 'processing') return
  await d.settle(final, { billed, endedAt: final.updatedAt })
  await d.announce(final)
  const written = await advance(d, t, {
    status: final.status,
    outputs: final.outputs,
    error: final.error,
    updatedAt: final.updatedAt,
    ...placement(final),
  })
  if (!written) d.log.warn({ taskId: t.id }, 'task changed while it was being finished')
  else d.log.info({ taskId: t.id, status: final.status, model: t.model }, 'task finished')
}

async function succeed(d: RunnerDeps, t: TaskRecord, result: MediaResult): Promise<void> {
  const outputs = await d.keeper.keep(t.id, t.accountId, result.outputs)
  const final: TaskRecord = { ...t, status: 'success', outputs, error: null, updatedAt: d.now() }
  await finish(d, t, final, result.usage)
}

async function fail(d: RunnerDeps, t: TaskRecord, error: TaskError, billed: BillableUsage | null = null) {
  const final: TaskRecord = { ...t, status: 'failed', error, updatedAt: d.now() }
  await finish(d, t, final, billed)
}

async function cancelUpstream(r: Runner, p: MediaProvider | undefined, t: TaskRecord, signal: AbortSignal) {
  if (!p?.media.cancel || t.upstreamState === null) return
  await p.media.cancel(toJob(t), t.upstreamState, callFor(r, p, t, signal)).catch((err: unknown) => {
    r.d.log.warn({ err, taskId: t.id }, 'could not cancel the upstream job')
  })
}

/** One step of a leased task: cancel it upstream, fail it, or submit or poll it. */
async function runStep(r: Runner, t: TaskRecord): Promise<void> {
  const { d } = r
  const submitting = t.upstreamState === null && t.status === 'processing'
  // A step never outlives its lease: past it another instance may take the task over. A submit is
  // not cut by this instance stopping (stop waits for it): cut, it may have started a job upstream
  // that nobody would know of.
  const leaseTimeout = AbortSignal.timeout(Math.floor(d.config.leaseMs * 0.8))
  const signal = submitting ? leaseTimeout : AbortSignal.any([r.stopping, leaseTimeout])
  const p = d.providerFor(t.provider)
  if (t.status === 'cancelled') {
    await cancelUpstream(r, p, t, signal)
    await advance(d, t, { cancelUpstream: false })
    return
  }
  const candidates = submitting ? d.submitCandidates(t) : []
  if (submitting ? candidates.length === 0 : !p) {
    await fail(d, t, {
      code: 'no_available_provider',
      message: submitting
        ? `no configured provider serves ${t.model} predictions`
        : `provider ${t.provider} serves no predictions`,
    })
    return
  }
  if (d.now() >= t.deadlineAt) {
    await cancelUpstream(r, p, t, signal)
    await fail(d, t, {
      code: 'timeout',
      message: `the task did not finish within ${Math.round(d.config.maxTaskMs / 1000)} s`,
    })
    return
  }
  if (submitting) await submit(r, t, candidates, signal)
  else await poll(r, t, p as MediaProvider, signal)
}

/** Polls the deployment that accepted the task: it stays there, whatever its breaker says. */
async function poll(r: Runner, t: TaskRecord, p: MediaProvider, signal: AbortSignal): Promise<void> {
  const key = healthKey(t.model, t.deployment)
  const started = r.d.now()
  let s: MediaStep
  try {
    s = await p.media.poll(toJob(t), t.upstreamState as JsonValue, callFor(r, p, t, signal))
  } catch (err) {
    reportFailure(r.d, key, t.provider, err, signal, false)
    // A poll cut by this instance stopping was no upstream's failure: it is not kept.
    const tried = signal.aborted ? t : withAttempt(t, started, r.d.now(), err)
    await stepFailed(r, tried, err, false, p.media, signal)
    return
  }
  r.d.health.success(key, r.d.now() - started)
  await stepDone(r, t, s, false, p.media, signal)
}

/**
 * Offers the task to each candidate in turn, its own deployment first (see the top of this file).
 * When every one turned it away, or none was in rotation, it is offered again after a backoff.
 */
async function submit(r: Runner, t: TaskRecord, candidates: MediaCandidate[], signal: AbortSignal) {
  const { d } = r
  if (t.submitStartedAt !== null) {
    // A submit began and its answer was never recorded (the instance holding the task died or
    // was killed): the upstream may run that job, so a second one is not started.
    await fail(d, t, {
      code: 'upstream_error',
      message:
        'the gateway stopped while submitting the job and cannot tell whether the upstream accepted it; it is not submitted again',
    })
    return
  }
  const own = candidates.filter((c) => c.deployment.id === t.deployment)
  const order = [...own, ...candidates.filter((c) => c.deployment.id !== t.deployment)]
  let marked = false
  /** The task with the submits made so far in this step kept on it. */
  let tried = t
  for (const c of order) {
    if (signal.aborted) break
    // An open breaker (or a half-open one whose probe is out) is not offered the task.
    if (!d.health.tryAcquire(c.key)) continue
    const media = c.provider.media
    if (!media.idempotentSubmit && !marked) {
      // Recorded before the request leaves, so whoever takes the task over after a crash knows.
      if (!(await d.tasks.markSubmitting(t.id, d.owner, d.now()))) {
        d.health.neutral(c.key)
        return
      }
      marked = true
    }
    const at: TaskRecord = { ...tried, ...placement({ ...c.deployment, deployment: c.deployment.id }) }
    const started = d.now()
    let s: MediaStep
    try {
      s = await media.submit(toJob(at), callFor(r, c.provider, at, signal))
    } catch (err) {
      reportFailure(d, c.key, c.deployment.provider, err, signal, true)
      tried = { ...withAttempt(at, started, d.now(), err), ...placement(tried) }
      const e = toGatewayError(err)
      if (!signal.aborted && e.retryable && submitNotAccepted(err)) {
        d.log.warn(
          { err, taskId: t.id, deployment: c.deployment.id },
          'the upstream turned the task away; offering it to the next deployment',
        )
        continue
      }
      await stepFailed(r, { ...tried, ...placement(at) }, err, true, media, signal)
      return
    }
    d.health.success(c.key, d.now() - started)
    if (at.deployment !== t.deployment) {
      d.log.info({ taskId: t.id, from: t.deployment, to: at.deployment }, 'task moved to another deployment')
    }
    await stepDone(r, withAttempt(at, started, d.now()), s, true, media, signal)
    return
  }
  d.log.warn({ taskId: t.id, runs: t.runs }, 'no deployment took the task; will offer it again')
  // Nothing can have been started upstream: a later submit may go anywhere.
  await retryLater(r, tried, { submitStartedAt: null })
}

/** What the upstream's answer to a submit or poll makes of the task. */
async function stepDone(
  r: Runner,
  t: TaskRecord,
  s: MediaStep,
  submitting: boolean,
  media: MediaAdapter,
  signal: AbortSignal,
): Promise<void> {
  switch (s.state) {
    case 'pending':
      await advance(r.d, t, {
        upstreamState: s.job,
        runs: t.runs + 1,
        nextRunAt: r.d.now() + pollDelay(t.runs, r.d.config),
        ...placement(t),
      })
      return
    case 'done':
      try {
        await succeed(r.d, t, s.result)
      } catch (err) {
        await keepingFailed(r, t, err, submitting, media, signal)
      }
      return
    case 'failed':
      await fail(r.d, t, { code: s.code, message: s.message }, s.billed ?? null)
      return
  }
}

/** A fault of the gateway itself (ffmpeg missing, a bug): logged with its cause, the task failed. */
async function failInsideGateway(d: RunnerDeps, t: TaskRecord, err: unknown): Promise<void> {
  d.log.error({ err, taskId: t.id }, 'task failed inside the gateway')
  await fail(d, t, { code: 'internal_error', message: 'the task failed inside the gateway' })
}

/**
 * The outputs of a done job could not be kept: they are downloaded (or encoded) as they are kept,
 * and a failure there is the step's, retried with the poll's backoff like any other (the upstream
 * job stays done) unless it is the gateway's own or the job cannot be fetched again.
 */
async function keepingFailed(
  r: Runner,
  t: TaskRecord,
  err: unknown,
  submitting: boolean,
  media: MediaAdapter,
  signal: AbortSignal,
): Promise<void> {
  const { d } = r
  const e = toGatewayError(err)
  if (!signal.aborted && e.code === 'internal_error') {
    await failInsideGateway(d, t, err)
  } else if (submitting && !media.idempotentSubmit) {
    // Done at submit, with no job to poll again: fetching the outputs once more would take a
    // second submit, which may start (and bill) a second job upstream.
    d.log.warn({ err, taskId: t.id }, 'keeping the outputs of a job done at submit failed')
    await fail(d, t, {
      code: e.code,
      message: `the upstream finished the job but its outputs could not be kept (${e.message}); it is not submitted again`,
    })
  } else if (signal.aborted || e.retryable || e.status >= 500) {
    d.log.warn({ err, taskId: t.id, runs: t.runs }, 'keeping the outputs failed; will retry')
    await retryLater(r, t)
  } else {
    await fail(d, t, { code: e.code, message: e.message })
  }
}

/** A submit or poll that threw (a submit turned away is not here: it went to the next deployment). */
async function stepFailed(
  r: Runner,
  t: TaskRecord,
  err: unknown,
  submitting: boolean,
  media: MediaAdapter,
  signal: AbortSignal,
): Promise<void> {
  const { d } = r
  const e = toGatewayError(err)
  // A step cut by its own deadline (or by this instance stopping) is tried again, whatever it threw.
  if (!signal.aborted && e.code === 'internal_error') {
    // A fault of the gateway (ffmpeg missing, a bug): retrying will not help; the cause is logged.
    await failInsideGateway(d, t, err)
    return
  }
  const transient = signal.aborted || e.retryable || e.status >= 500
  if (submitting && transient && !media.idempotentSubmit && !submitNotAccepted(err)) {
    // The upstream may have accepted the job before the answer was lost (a timeout, a 5xx, a
    // reset): submitting again, there or elsewhere, could start and bill a second job. It fails.
    d.log.warn({ err, taskId: t.id }, 'task submit failed after it may have reached the upstream')
    await fail(d, t, {
      code: signal.aborted ? 'upstream_timeout' : e.code,
      message: `the upstream did not confirm the job (${signal.aborted ? 'timed out' : e.message}); it is not submitted again, since the upstream may have started it`,
    })
    return
  }
  if (transient) {
    // Network trouble, an upstream 5xx or 429, or this instance stopping: try again later.
    d.log.warn({ err, taskId: t.id, runs: t.runs }, 'task step failed; will retry')
    // A submit that certainly left no job behind may be sent again.
    await retryLater(r, t, submitting ? { submitStartedAt: null } : {})
    return
  }
  // The upstream refused the job (a 4xx): final.
  await fail(d, t, { code: e.code, message: e.message })
}

/** A step whose store or storage failed: the lease runs out and the step is repeated (by anyone). */
async function guardedStep(r: Runner, t: TaskRecord): Promise<void> {
  try {
    await runStep(r, t)
  } catch (err) {
    r.d.log.error({ err, taskId: t.id }, 'task step failed')
  }
}

/** The steps running on this instance now, in all and per account. */
interface Slots {
  inFlight: Set<Promise<void>>
  /** Account id → its steps running here now. */
  busy: Map<string, number>
}

/**
 * Claims what is due and fits the free slots, each account within its share (one account's tasks
 * on an upstream that hangs hold only that share), and starts their steps; `steps` resolves when
 * they are done. `freed` is called as each step ends.
 */
async function claim(
  r: Runner,
  slots: Slots,
  freed: () => void,
): Promise<{ count: number; steps: Promise<unknown> }> {
  const { d } = r
  const { inFlight, busy } = slots
  const room = d.config.concurrency - inFlight.size
  if (room <= 0 || r.stopping.aborted) return { count: 0, steps: Promise.resolve() }
  const share = { perAccount: d.config.accountConcurrency, busy: new Map(busy) }
  const due = await d.tasks.claimDue(d.owner, d.now(), d.config.leaseMs, room, share)
  const steps = due.map((t) => {
    busy.set(t.accountId, (busy.get(t.accountId) ?? 0) + 1)
    const p = guardedStep(r, t).finally(() => {
      inFlight.delete(p)
      const left = (busy.get(t.accountId) ?? 1) - 1
      if (left > 0) busy.set(t.accountId, left)
      else busy.delete(t.accountId)
      freed()
    })
    inFlight.add(p)
    return p
  })
  return { count: due.length, steps: Promise.all(steps) }
}

/**
 * The timer's claims: one at a time, another right after when a step ended meanwhile. The timer
 * does not wait for the steps: a slow upstream must not hold up the other tasks.
 */
function createTicker(r: Runner, slots: Slots) {
  let timer: NodeJS.Timeout | undefined
  let claiming: Promise<number> | undefined
  /** A step ended while a claim was under way: claim again after it. */
  let again = false

  function tick(): void {
    if (r.stopping.aborted) return
    if (claiming) {
      again = true
      return
    }
    // A step's slot is free when it ends: fill it now rather than at the next tick.
    claiming = claim(r, slots, () => timer && tick())
      .then((c) => c.count)
      .catch((err: unknown) => {
        r.d.log.warn({ err }, 'could not claim due tasks')
        return 0
      })
      .finally(() => {
        claiming = undefined
        if (again) {
          again = false
          tick()
        }
      })
  }

  return {
    tick,
    running: () => timer !== undefined,
    start(tickMs: number) {
      timer = setInterval(tick, tickMs)
      timer.unref()
      tick()
    },
    /** Stops the timer; resolves when the claim under way (if any) is done. */
    async stop() {
      clearInterval(timer)
      await claiming
    },
  }
}

export function createTaskRunner(d: RunnerDeps): TaskRunner {
  const stopping = new AbortController()
  const r: Runner = { d, stopping: stopping.signal }
  const slots: Slots = { inFlight: new Set(), busy: new Map() }
  const ticker = createTicker(r, slots)
  return {
    async runOnce() {
      const { count, steps } = await claim(r, slots, () => ticker.running() && ticker.tick())
      await steps
      return count
    },
    start: ticker.start,
    wake() {
      if (ticker.running() && !stopping.signal.aborted) setImmediate(ticker.tick)
    },
    async stop() {
      stopping.abort()
      await ticker.stop()
      await Promise.all([...slots.inFlight])
    },
  }
}

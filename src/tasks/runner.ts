import type { Logger } from 'pino'
import type { PredictionsConfig } from '../config.ts'
import { toGatewayError, UpstreamError } from '../errors.ts'
import type { BillableUsage } from '../billing/prices.ts'
import type {
  MediaAdapter,
  MediaCall,
  MediaJob,
  MediaResult,
  MediaStep,
  MediaTools,
} from '../providers/async-media/types.ts'
import type { UpstreamCall } from '../providers/types.ts'
import type { TaskError, TaskRecord, TaskStore } from '../store/tasks.ts'
import type { OutputKeeper } from './outputs.ts'

// Drives prediction tasks to their end. Tasks live in the store, never only here: the runner of any
// instance leases the tasks that are due (TaskStore.claimDue), does one step of each (submit to the
// upstream, or poll it, or cancel it there) and writes the result back, freeing the lease. An
// instance that dies mid-step simply stops holding its leases; another instance (or this one after a
// restart) takes the task over when the lease runs out and repeats the step.
//
// A finished task is settled and its webhook queued BEFORE its status is written: both are idempotent
// per task id (one generation record, one delivery id), so a crash in between repeats them harmlessly,
// while the opposite order could leave a finished task unbilled or unannounced.

export interface MediaProvider {
  adapter: MediaAdapter
  /** The call context for the upstream, without signal and log (the runner adds them). */
  call: Omit<UpstreamCall, 'signal' | 'log' | 'upstreamModel'>
}

export interface TaskEnd {
  /** What the upstream billed: the task's price for a success, or a failed job the upstream charged. */
  billed: BillableUsage | null
  endedAt: number
}

export interface RunnerDeps {
  tasks: TaskStore
  keeper: OutputKeeper
  /** The media adapter and upstream of a configured provider, or undefined when it serves no media. */
  providerFor(name: string): MediaProvider | undefined
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

export function toJob(t: TaskRecord): MediaJob {
  return {
    family: t.family,
    input: t.input,
    taskId: t.id,
    upstreamModel: t.upstreamModel,
  } as MediaJob
}

export function createTaskRunner(d: RunnerDeps): TaskRunner {
  const inFlight = new Set<Promise<void>>()
  /** Account id → its steps running here now. */
  const busy = new Map<string, number>()
  const stopping = new AbortController()
  let timer: NodeJS.Timeout | undefined
  let claiming: Promise<number> | undefined
  /** A step ended while a claim was under way: claim again after it. */
  let again = false

  function callFor(p: MediaProvider, t: TaskRecord, signal: AbortSignal): MediaCall {
    return {
      ...p.call,
      upstreamModel: t.upstreamModel,
      signal,
      log: d.log.child({ taskId: t.id, provider: t.provider }) as unknown as UpstreamCall['log'],
      media: d.tools,
    }
  }

  /** Writes `patch` as the task's next state and frees the lease; false when a cancel came first. */
  async function advance(t: TaskRecord, patch: Parameters<TaskStore['advance']>[3]): Promise<boolean> {
    const after = await d.tasks.advance(t.id, d.owner, t.status, { updatedAt: d.now(), ...patch })
    return after !== null
  }

  async function finish(t: TaskRecord, final: TaskRecord, billed: BillableUsage | null): Promise<void> {
    // A cancel may have come in while the upstream worked: the client's word wins, nothing is billed.
    const current = await d.tasks.get(t.id)
    if (!current || current.status !== 'processing') return
    await d.settle(final, { billed, endedAt: final.updatedAt })
    await d.announce(final)
    const written = await advance(t, {
      status: final.status,
      outputs: final.outputs,
      error: final.error,
      updatedAt: final.updatedAt,
    })
    if (!written) d.log.warn({ taskId: t.id }, 'task changed while it was being finished')
    else d.log.info({ taskId: t.id, status: final.status, model: t.model }, 'task finished')
  }

  async function succeed(t: TaskRecord, result: MediaResult): Promise<void> {
    const outputs = await d.keeper.keep(t.id, t.accountId, result.outputs)
    const final: TaskRecord = { ...t, status: 'success', outputs, error: null, updatedAt: d.now() }
    await finish(t, final, result.usage)
  }

  async function fail(t: TaskRecord, error: TaskError, billed: BillableUsage | null = null): Promise<void> {
    const final: TaskRecord = { ...t, status: 'failed', error, updatedAt: d.now() }
    await finish(t, final, billed)
  }

  async function cancelUpstream(p: MediaProvider | undefined, t: TaskRecord, signal: AbortSignal) {
    if (!p?.adapter.cancel || t.upstreamState === null) return
    await p.adapter.cancel(toJob(t), t.upstreamState, callFor(p, t, signal)).catch((err: unknown) => {
      d.log.warn({ err, taskId: t.id }, 'could not cancel the upstream job')
    })
  }

  async function step(t: TaskRecord): Promise<void> {
    const p = d.providerFor(t.provider)
    const submitting = t.upstreamState === null && t.status === 'processing'
    // A step never outlives its lease: past it another instance may take the task over. A submit is
    // not cut by this instance stopping (stop waits for it): cut, it may have started a job upstream
    // that nobody would know of.
    const leaseTimeout = AbortSignal.timeout(Math.floor(d.config.leaseMs * 0.8))
    const signal = submitting ? leaseTimeout : AbortSignal.any([stopping.signal, leaseTimeout])
    if (t.status === 'cancelled') {
      await cancelUpstream(p, t, signal)
      await advance(t, { cancelUpstream: false })
      return
    }
    if (!p) {
      await fail(t, {
        code: 'no_available_provider',
        message: `provider ${t.provider} serves no predictions`,
      })
      return
    }
    if (d.now() >= t.deadlineAt) {
      await cancelUpstream(p, t, signal)
      await fail(t, {
        code: 'timeout',
        message: `the task did not finish within ${Math.round(d.config.maxTaskMs / 1000)} s`,
      })
      return
    }
    if (submitting && !p.adapter.idempotentSubmit) {
      if (t.submitStartedAt !== null) {
        // A submit began and its answer was never recorded (the instance holding the task died or
        // was killed): the upstream may run that job, so a second one is not started.
        await fail(t, {
          code: 'upstream_error',
          message:
            'the gateway stopped while submitting the job and cannot tell whether the upstream accepted it; it is not submitted again',
        })
        return
      }
      // Recorded before the request leaves, so whoever takes the task over after a crash knows.
      if (!(await d.tasks.markSubmitting(t.id, d.owner, d.now()))) return
    }
    let s: MediaStep
    try {
      const call = callFor(p, t, signal)
      s =
        t.upstreamState === null
          ? await p.adapter.submit(toJob(t), call)
          : await p.adapter.poll(toJob(t), t.upstreamState, call)
    } catch (err) {
      const e = toGatewayError(err)
      // A step cut by its own deadline (or by this instance stopping) is tried again, whatever it threw.
      if (!signal.aborted && e.code === 'internal_error') {
        // A fault of the gateway (ffmpeg missing, a bug): retrying will not help; the cause is logged.
        d.log.error({ err, taskId: t.id }, 'task failed inside the gateway')
        await fail(t, { code: 'internal_error', message: 'the task failed inside the gateway' })
        return
      }
      if (
        submitting &&
        (signal.aborted || e.retryable || e.status >= 500) &&
        !p.adapter.idempotentSubmit &&
        !submitNotAccepted(err)
      ) {
        // The upstream may have accepted the job before the answer was lost (a timeout, a 5xx, a
        // reset): submitting again could start and bill a second job. The task fails instead.
        d.log.warn({ err, taskId: t.id }, 'task submit failed after it may have reached the upstream')
        await fail(t, {
          code: signal.aborted ? 'upstream_timeout' : e.code,
          message: `the upstream did not confirm the job (${signal.aborted ? 'timed out' : e.message}); it is not submitted again, since the upstream may have started it`,
        })
        return
      }
      if (signal.aborted || e.retryable || e.status >= 500) {
        // Network trouble, an upstream 5xx or 429, or this instance stopping: try again later.
        d.log.warn({ err, taskId: t.id, runs: t.runs }, 'task step failed; will retry')
        await advance(t, {
          runs: t.runs + 1,
          nextRunAt: d.now() + (stopping.signal.aborted ? 0 : pollDelay(t.runs, d.config)),
          // A submit that certainly left no job behind may be sent again.
          ...(submitting ? { submitStartedAt: null } : {}),
        })
        return
      }
      // The upstream refused the job (a 4xx): final.
      await fail(t, { code: e.code, message: e.message })
      return
    }
    switch (s.state) {
      case 'pending':
        await advance(t, {
          upstreamState: s.job,
          runs: t.runs + 1,
          nextRunAt: d.now() + pollDelay(t.runs, d.config),
        })
        return
      case 'done':
        try {
          await succeed(t, s.result)
        } catch (err) {
          // The outputs are downloaded (or encoded) as they are kept: a failure there is the step's,
          // retried with the poll's backoff like any other (the upstream job stays done).
          const e = toGatewayError(err)
          if (!signal.aborted && e.code === 'internal_error') {
            d.log.error({ err, taskId: t.id }, 'task failed inside the gateway')
            await fail(t, { code: 'internal_error', message: 'the task failed inside the gateway' })
          } else if (submitting && !p.adapter.idempotentSubmit) {
            // Done at submit, with no job to poll again: fetching the outputs once more would take a
            // second submit, which may start (and bill) a second job upstream.
            d.log.warn({ err, taskId: t.id }, 'keeping the outputs of a job done at submit failed')
            await fail(t, {
              code: e.code,
              message: `the upstream finished the job but its outputs could not be kept (${e.message}); it is not submitted again`,
            })
          } else if (signal.aborted || e.retryable || e.status >= 500) {
            d.log.warn({ err, taskId: t.id, runs: t.runs }, 'keeping the outputs failed; will retry')
            await advance(t, {
              runs: t.runs + 1,
              nextRunAt: d.now() + (stopping.signal.aborted ? 0 : pollDelay(t.runs, d.config)),
            })
          } else {
            await fail(t, { code: e.code, message: e.message })
          }
        }
        return
      case 'failed':
        await fail(t, { code: s.code, message: s.message }, s.billed ?? null)
        return
    }
  }

  async function guarded(t: TaskRecord): Promise<void> {
    try {
      await step(t)
    } catch (err) {
      // A store or storage failure: the lease runs out and the step is repeated (by anyone).
      d.log.error({ err, taskId: t.id }, 'task step failed')
    }
  }

  /**
   * Claims what is due and fits the free slots, each account within its share (one account's tasks
   * on an upstream that hangs hold only that share), and starts their steps; `steps` resolves when
   * they are done.
   */
  async function claim(): Promise<{ count: number; steps: Promise<unknown> }> {
    const room = d.config.concurrency - inFlight.size
    if (room <= 0 || stopping.signal.aborted) return { count: 0, steps: Promise.resolve() }
    const share = { perAccount: d.config.accountConcurrency, busy: new Map(busy) }
    const due = await d.tasks.claimDue(d.owner, d.now(), d.config.leaseMs, room, share)
    const steps = due.map((t) => {
      busy.set(t.accountId, (busy.get(t.accountId) ?? 0) + 1)
      const p = guarded(t).finally(() => {
        inFlight.delete(p)
        const left = (busy.get(t.accountId) ?? 1) - 1
        if (left > 0) busy.set(t.accountId, left)
        else busy.delete(t.accountId)
        // Its slot is free: fill it now rather than at the next tick.
        if (timer) tick()
      })
      inFlight.add(p)
      return p
    })
    return { count: due.length, steps: Promise.all(steps) }
  }

  function tick(): void {
    if (stopping.signal.aborted) return
    if (claiming) {
      again = true
      return
    }
    // The timer does not wait for the steps: a slow upstream must not hold up the other tasks.
    claiming = claim()
      .then((c) => c.count)
      .catch((err: unknown) => {
        d.log.warn({ err }, 'could not claim due tasks')
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
    async runOnce() {
      const { count, steps } = await claim()
      await steps
      return count
    },
    start(tickMs) {
      timer = setInterval(tick, tickMs)
      timer.unref()
      tick()
    },
    wake() {
      if (timer && !stopping.signal.aborted) setImmediate(tick)
    },
    async stop() {
      clearInterval(timer)
      stopping.abort()
      await claiming
      await Promise.all([...inFlight])
    },
  }
}

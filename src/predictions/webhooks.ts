import type { PredictionsConfig } from './config.ts'
import { GatewayError } from '../errors.ts'
import { checkUrl, type LookupAll } from '../http/address-guard.ts'
import { SafeRequestError, safeRequest } from '../http/safe-fetch.ts'
import type { Logger } from '../logger.ts'
import type { WebhookDelivery, WebhookStore } from '../store/types.ts'
import { signWebhook } from './webhook-signing.ts'

// Webhook delivery (docs/design/decisions.md "Webhooks"): at-least-once, Standard Webhooks signed, retried with
// backoff and jitter up to `maxAttempts`. A finished task enqueues one delivery in the shared
// WebhookStore; every instance runs a sender that leases due deliveries, so a delivery whose sender
// died is taken over once its lease runs out (which may send it twice: receivers dedupe on
// `webhook-id`). The lease must outlast one attempt (`timeoutMs`), or a slow receiver gets doubles.
//
// Scheduling is per account: an instance sends at most `concurrency` deliveries at once and at most
// `accountConcurrency` of one account, so receivers that hang (each attempt up to `timeoutMs`) hold
// only their own account's share. Each attempt runs on its own: when one ends, its slot is filled by
// a new claim at once, without waiting for the others claimed with it.

export type WebhookEvent = 'task.finished'

export type WebhookConfig = PredictionsConfig['webhooks']

/** Receivers answer with a status; a longer body fails the attempt rather than fill memory. */
const MAX_RESPONSE_BYTES = 64 * 1024
const MAX_ERROR_LENGTH = 200
const USER_AGENT = 'Junction-Webhooks/1'

/**
 * The delivery of `event` for a finished task. Its id (the `webhook-id` header) is derived from the
 * task, so a finish that runs twice enqueues one delivery and every retry carries the same id.
 */
export function buildDelivery(
  task: { id: string; accountId: string },
  url: string,
  body: string,
  event: WebhookEvent,
  now: number,
): WebhookDelivery {
  // Tasks send one event; should another be added, its id needs the event name to stay unique.
  void event
  return {
    id: `msg_${task.id}`,
    taskId: task.id,
    accountId: task.accountId,
    url,
    body,
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    lastError: null,
    leaseOwner: '',
    leaseUntil: 0,
    createdAt: now,
  }
}

/**
 * The wait (ms) before retry `attempt` (1-based: after the first failed attempt comes retry 1, which
 * waits `schedule[0]`); the last entry repeats beyond the schedule. ±20 % jitter spreads the retries
 * of many deliveries that failed together (a receiver outage) so they do not return in one burst.
 */
export function nextDelay(
  attempt: number,
  schedule: readonly number[],
  random: () => number = Math.random,
): number {
  if (schedule.length === 0) return 0
  const index = Math.min(Math.max(attempt, 1), schedule.length) - 1
  const base = schedule[index]!
  const factor = 1 + (random() * 2 - 1) * 0.2
  return Math.max(0, Math.round(base * factor))
}

export interface WebhookSenderDeps {
  store: WebhookStore
  /** The account's `whsec_…` signing secret. */
  secrets: { secretFor(accountId: string): Promise<string> }
  config: WebhookConfig
  /** Unix ms. */
  now: () => number
  log: Logger
  /** This instance's lease owner name. */
  owner: string
  leaseMs: number
  lookup?: LookupAll
  random?: () => number
}

export interface WebhookSender {
  /**
   * Claims the due deliveries that fit the free slots, sends each once and records the results;
   * returns how many were sent.
   */
  runOnce(): Promise<number>
  /**
   * Looks for due deliveries every `intervalMs`, and whenever an attempt ends, until `stop`; an
   * attempt does not wait for the others.
   */
  start(intervalMs: number): void
  /** Stops the loop and waits for the attempts in flight. */
  stop(): Promise<void>
}

export function createWebhookSender(deps: WebhookSenderDeps): WebhookSender {
  const { store, config, log, owner } = deps
  const inFlight = new Set<Promise<unknown>>()
  /** Account id → its deliveries being attempted here now. */
  const busy = new Map<string, number>()
  let active = 0
  let timer: NodeJS.Timeout | undefined
  let stopped = true
  /** The claim under way, and whether a slot freed up meanwhile (claim again after it). */
  let claiming: Promise<unknown> | undefined
  let again = false

  const track = <T>(p: Promise<T>): Promise<T> => {
    inFlight.add(p)
    void p.finally(() => inFlight.delete(p)).catch(() => {})
    return p
  }

  async function attempt(d: WebhookDelivery): Promise<void> {
    const attemptNo = d.attempts + 1
    const host = hostOf(d.url)
    let error: string | null = null
    let status: number | undefined
    try {
      const policy = { allowHttp: config.allowHttp, allowedHosts: config.allowedHosts }
      // Checked again at every attempt: the rules or the name's answers may have changed since the
      // task was created. safeRequest resolves and pins the address.
      const url = checkUrl(d.url, policy, 'webhook')
      const secret = await deps.secrets.secretFor(d.accountId)
      const timestamp = Math.floor(deps.now() / 1000)
      const res = await safeRequest(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': USER_AGENT,
          'webhook-id': d.id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': signWebhook(secret, d.id, timestamp, d.body),
        },
        body: d.body,
        timeoutMs: config.timeoutMs,
        maxBytes: MAX_RESPONSE_BYTES,
        policy,
        ...(deps.lookup ? { lookup: deps.lookup } : {}),
      })
      status = res.status
      // Any 2xx ends it; a 3xx is a failure too, since redirects are never followed.
      if (res.status < 200 || res.status > 299) error = `receiver answered HTTP ${res.status}`
    } catch (err) {
      error = describeError(err)
    }

    const after = deps.now()
    let result: Pick<WebhookDelivery, 'status' | 'attempts' | 'nextAttemptAt' | 'lastError'>
    if (error === null) {
      result = { status: 'delivered', attempts: attemptNo, nextAttemptAt: d.nextAttemptAt, lastError: null }
    } else if (attemptNo >= config.maxAttempts) {
      result = { status: 'failed', attempts: attemptNo, nextAttemptAt: d.nextAttemptAt, lastError: error }
    } else {
      const wait = nextDelay(attemptNo, config.schedule, deps.random)
      result = { status: 'pending', attempts: attemptNo, nextAttemptAt: after + wait, lastError: error }
    }
    // The URL's path and query may carry the receiver's token: only the host is logged.
    const fields = {
      deliveryId: d.id,
      taskId: d.taskId,
      host,
      attempt: attemptNo,
      status,
      outcome: result.status,
    }
    if (error === null) log.info(fields, 'webhook delivered')
    else log.warn({ ...fields, error, nextAttemptAt: result.nextAttemptAt }, 'webhook attempt failed')

    const recorded = await store.record(d.id, owner, result)
    if (!recorded) log.warn({ deliveryId: d.id }, 'webhook lease lost before the result was recorded')
  }

  /** Starts the attempt of a claimed delivery in its own slot; the slot is freed when it ends. */
  function launch(d: WebhookDelivery): Promise<void> {
    active++
    busy.set(d.accountId, (busy.get(d.accountId) ?? 0) + 1)
    const done = attempt(d)
      .catch((err: unknown) => {
        // Only the store can fail here; the lease runs out and the delivery is tried again.
        log.error({ err, deliveryId: d.id }, 'webhook result not recorded')
      })
      .finally(() => {
        active--
        const left = (busy.get(d.accountId) ?? 1) - 1
        if (left > 0) busy.set(d.accountId, left)
        else busy.delete(d.accountId)
        pump()
      })
    return track(done)
  }

  /** Claims what fits the free slots (each account within its share) and starts each attempt. */
  async function claim(): Promise<Promise<void>[]> {
    const room = config.concurrency - active
    if (room <= 0) return []
    const share = { perAccount: config.accountConcurrency, busy: new Map(busy) }
    const due = await store.claimDue(owner, deps.now(), deps.leaseMs, room, share)
    return due.map(launch)
  }

  /** The background loop's claim: never two at once; a slot freed meanwhile is filled right after. */
  function pump(): void {
    if (stopped) return
    if (claiming) {
      again = true
      return
    }
    claiming = track(
      claim()
        .catch((err: unknown) => log.error({ err }, 'webhook sender pass failed'))
        .finally(() => {
          claiming = undefined
          if (again) {
            again = false
            pump()
          }
        }),
    )
  }

  async function runOnce(): Promise<number> {
    const started = await claim()
    await Promise.all(started)
    return started.length
  }

  return {
    runOnce: () => track(runOnce()),
    start(intervalMs) {
      stopped = false
      if (timer !== undefined) return
      timer = setInterval(pump, intervalMs)
      timer.unref()
      pump()
    },
    async stop() {
      stopped = true
      if (timer !== undefined) clearInterval(timer)
      timer = undefined
      while (inFlight.size > 0) await Promise.allSettled([...inFlight])
    },
  }
}

/** A short reason for `lastError` and the log: never the secret, the body or the full URL. */
function describeError(err: unknown): string {
  let message: string
  if (err instanceof GatewayError || err instanceof SafeRequestError) message = err.message
  else if (err instanceof Error) {
    const code = (err as { code?: unknown }).code
    message = `attempt failed (${typeof code === 'string' ? code : err.name})`
  } else message = 'attempt failed'
  return message.slice(0, MAX_ERROR_LENGTH)
}

function hostOf(raw: string): string {
  try {
    return new URL(raw).host
  } catch {
    return '(invalid URL)'
  }
}

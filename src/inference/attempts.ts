import type { RoutingConfig } from '../routing/config.ts'
import { GatewayError, toGatewayError, UpstreamError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { Metrics } from '../metrics.ts'
import type { UpstreamCall } from '../providers/types.ts'
import type { Health } from '../routing/health.ts'
import type { Candidate } from '../routing/router.ts'
import type { AttemptRecord } from '../domain/records.ts'
import type { Generation } from './generation.ts'

// Retries before anything is committed to the client. The candidates are tried in order; a failure
// that another call may not share (5xx, 529, timeout, connection error, 429, the gateway's key
// refused) moves on to the next candidate, and when every candidate had its turn, those with tries
// left are called again after a backoff (a 429's Retry-After when it is short enough). A failure the
// request caused (an upstream 400) is never retried. Every call is reported to the deployment's
// circuit breaker and kept in the generation's attempt list.

export interface AttemptContext {
  generation: Generation
  /** The client's signal: once it fired, no other call is made. */
  signal: AbortSignal
  log: Logger
  /** Prompt tokens, counted only when a cancelled request must be billed by estimate. */
  promptTokens: () => Promise<number>
  health: Health
  routing: RoutingConfig
  now: () => number
  /** Waits before a retry of the same deployment; ends early (rejecting) when `signal` fires. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
  /** Failed upstream calls are counted here when present. */
  metrics?: Metrics
  /** The W3C trace context sent with every upstream call (see tracing.ts). */
  traceparent?: string
}

export interface Answered<T> {
  candidate: Candidate
  value: T
}

interface Tried {
  tries: number
  /** No further call to this deployment in this request (credentials refused, Retry-After too long). */
  done: boolean
  /** Unix ms before which it is not called again (Retry-After). */
  notBefore: number
  endedAt: number
}

/**
 * Calls the candidates until one answers (see above). When none does, the generation is ended
 * (recorded as the prompt's if the client left, released otherwise) and the last failure is thrown;
 * when the breakers let no call through at all, 503 `no_available_provider`.
 */
export async function tryCandidates<T>(
  candidates: readonly Candidate[],
  ctx: AttemptContext,
  call: (c: Candidate, upstream: UpstreamCall) => Promise<T>,
): Promise<Answered<T>> {
  const { routing, health, now } = ctx
  const sleep = ctx.sleep ?? defaultSleep
  const started = now()
  const state = new Map<Candidate, Tried>(
    candidates.map((c) => [c, { tries: 0, done: false, notBefore: 0, endedAt: 0 }]),
  )
  let lastError: unknown
  let lastCandidate = candidates[0] as Candidate
  let made = 0
  const maxTries = Math.max(...candidates.map((c) => c.provider.config.retry.attemptsPerDeployment))

  try {
    for (let pass = 0; pass < maxTries; pass++) {
      for (const c of candidates) {
        const s = state.get(c) as Tried
        if (s.done || s.tries >= c.provider.config.retry.attemptsPerDeployment) continue
        if (made >= routing.maxAttempts) break
        let wait = 0
        if (s.tries > 0) {
          const backoff = backoffMs(c.provider.config.retry, s.tries)
          wait = Math.max(s.endedAt + backoff, s.notBefore) - now()
        }
        if (made > 0 && now() + Math.max(wait, 0) - started >= routing.budgetMs) continue
        if (wait > 0) await sleep(wait, ctx.signal)
        if (ctx.signal.aborted) throw ctx.signal.reason ?? new Error('client left')
        // An open breaker (or a half-open one whose probe is out) lets no call through.
        if (!health.tryAcquire(c.key)) continue
        made++
        s.tries++
        lastCandidate = c
        const attemptStart = now()
        let firstByteAt: number | undefined
        try {
          const value = await call(c, {
            upstream: c.provider.config,
            upstreamModel: c.deployment.upstreamModel,
            signal: ctx.signal,
            log: ctx.log,
            dispatcher: c.provider.dispatcher,
            traceparent: ctx.traceparent,
            onFirstByte: () => {
              firstByteAt ??= now()
            },
          })
          const ended = now()
          health.success(c.key, (firstByteAt ?? ended) - attemptStart)
          ctx.generation.attempted(attemptRecord(c, attemptStart, ended, 200, 'ok'))
          ctx.generation.firstByte(firstByteAt ?? ended)
          return { candidate: c, value }
        } catch (err) {
          const e = toGatewayError(err)
          const status = err instanceof UpstreamError ? err.upstreamStatus : null
          s.endedAt = now()
          ctx.generation.attempted(attemptRecord(c, attemptStart, s.endedAt, status, e.code))
          if (!ctx.signal.aborted)
            ctx.metrics?.upstreamErrors.inc({ provider: c.deployment.provider, code: e.code })
          lastError = err
          if (ctx.signal.aborted) {
            health.neutral(c.key)
            throw err
          }
          if (!e.retryable) {
            // The request's own fault: says nothing of the deployment, and no one else would take it.
            health.neutral(c.key)
            throw err
          }
          judge(c, e, status, s)
          ctx.log.warn(
            {
              deployment: c.deployment.id,
              model: c.model.slug,
              status: e.status,
              code: e.code,
              attempt: made,
            },
            'upstream call failed before answering; trying again',
          )
        }
      }
    }
    if (lastError === undefined) {
      lastError = new GatewayError(
        'no_available_provider',
        `every provider of ${lastCandidate.model.slug} is out of rotation after repeated failures; retry later`,
        { headers: { 'retry-after': '1' } },
      )
    }
    throw lastError
  } catch (err) {
    await giveUp(ctx, lastCandidate)
    throw err
  }

  function judge(c: Candidate, e: GatewayError, status: number | null, s: Tried): void {
    if (status === 429) {
      // Rate limited is not unhealthy; it says when to come back.
      health.neutral(c.key)
      const after = retryAfterMs(e.headers['retry-after'])
      if (after !== undefined && after > routing.maxRetryAfterMs) s.done = true
      else s.notBefore = s.endedAt + (after ?? 0)
      return
    }
    health.failure(c.key)
    // Our key refused: calling the same deployment again cannot help.
    if (status === 401 || status === 403) s.done = true
  }
}

async function giveUp(ctx: AttemptContext, last: Candidate): Promise<void> {
  if (ctx.signal.aborted) {
    // The client never sees this id (no answer goes out); the log line lets support find the record.
    ctx.log.info(
      { generationId: ctx.generation.id, deployment: last.deployment.id },
      'client left before the first byte: billed for the prompt',
    )
  }
  await ctx.generation.finish({
    deployment: last.deployment,
    produced: false,
    cancelled: ctx.signal.aborted,
    finishReason: null,
    estimate: async () => ({ promptTokens: await ctx.promptTokens(), completionTokens: 0 }),
  })
}

function attemptRecord(
  c: Candidate,
  startedAt: number,
  endedAt: number,
  status: number | null,
  outcome: string,
): AttemptRecord {
  return {
    provider: c.deployment.provider,
    deployment: c.deployment.id,
    model: c.model.slug,
    status,
    outcome,
    startedAt,
    durationMs: endedAt - startedAt,
  }
}

/** Exponential from `backoffMs`, capped, with full jitter over its upper half. */
export function backoffMs(
  policy: { backoffMs: number; maxBackoffMs: number },
  triesSoFar: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(policy.maxBackoffMs, policy.backoffMs * 2 ** (triesSoFar - 1))
  return Math.round(ceiling / 2 + (random() * ceiling) / 2)
}

/** Retry-After as ms: whole seconds, or an HTTP date; undefined when absent or unreadable. */
export function retryAfterMs(value: string | undefined, now: number = Date.now()): number | undefined {
  if (value === undefined) return undefined
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? undefined : Math.max(0, at - now)
}

function defaultSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason as Error)
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = (): void => {
      clearTimeout(timer)
      reject(signal.reason as Error)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

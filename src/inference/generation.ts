import {
  admit,
  buildRecord,
  costBound,
  discountFor,
  hasUsage,
  normalizeUsage,
  release,
  settle,
  type Admission,
  type MeteringDeps,
} from '../billing/metering.ts'
import { GatewayError } from '../errors.ts'
import type { ReservationRef } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import type { AttemptRecord, GenerationRecord, GenerationUsage } from '../domain/records.ts'
import type { Renewals } from './renewals.ts'
import { checkNotices, wantsNotices } from '../keys/notices.ts'
import { toUsd } from '../billing/money.ts'
import type { Metrics } from '../metrics.ts'
import type { Usage } from '../domain/chat.ts'
import type { Deployment, ServedModel } from '../domain/models.ts'
import type { Money } from '../domain/money.ts'
import type { BillableUsage } from '../domain/prices.ts'

// One generation's life, shared by every kind of inference: admitted (rate limits, reservation),
// kept alive while it runs (the reservation is renewed), then settled exactly once, priced at the
// deployment that answered. Chat, embeddings and the other dialects run the whole of it in one
// request (`beginGeneration`); a prediction is held when it is created and closed by whichever
// runner ends it, so it uses the two ends on their own (`holdGeneration`, `closeGeneration`).

export interface HoldRequest {
  account: Account
  /** The key it is made with: its models and limits apply (see `admit`). */
  key?: ApiKeyRecord
  /** The hold names the key even without a limit, for a settle built elsewhere later (a task's). */
  holdKey?: boolean
  /** The model asked for: its slug keys the admission. */
  slug: string
  /** Every deployment that may answer: the hold assumes the smallest discount of their models. */
  deployments: readonly Deployment[]
  generationId: string
  /** Upper bound of the cost before discount, whichever deployment answers. */
  costBound: Money
  tokenEstimate: number
  /** How long the hold lasts without renewal. */
  ttlMs: number
  now: number
  /** The requests-per-minute limit already counted this request (see `admit`). */
  requestCounted?: boolean
}

/** Admits a generation: 429 or 402 before anything reaches an upstream, otherwise the credit hold. */
export function holdGeneration(deps: MeteringDeps, h: HoldRequest): Promise<Admission> {
  return admit(deps, {
    account: h.account,
    key: h.key,
    holdKey: h.holdKey,
    slug: h.slug,
    generationId: h.generationId,
    costBound: h.costBound,
    discountPpm: Math.min(
      discountFor(h.account, h.slug),
      ...[...new Set(h.deployments.map((d) => d.slug))].map((s) => discountFor(h.account, s)),
    ),
    tokenEstimate: h.tokenEstimate,
    ttlMs: h.ttlMs,
    now: h.now,
    requestCounted: h.requestCounted,
  })
}

export interface Closing {
  reservation: ReservationRef
  /** What to charge; null when nothing is billed (the hold is released). */
  record: GenerationRecord | null
  /** What was held: the charge is capped at this plus the account's overdraft; absent: not capped. */
  held?: Money
  /** The token estimate admission counted, corrected here; null: none was counted. */
  tokenEstimate: number | null
  /** The windows admission counted it in (`Admission.tokenKeys`); absent: the account's. */
  tokenKeys?: readonly string[]
  now: number
}

/**
 * Ends a generation once: releases its hold when nothing is billed, else charges the record (settle,
 * idempotent per generation id) and counts its tokens and cost. Never throws. `charged` is false when
 * the charge could not be committed (logged with the record for replay).
 */
export async function closeGeneration(
  deps: MeteringDeps,
  c: Closing,
): Promise<{ record: GenerationRecord | null; charged: boolean }> {
  if (c.record === null) {
    await release(deps, c.reservation, c.tokenEstimate, c.now, c.tokenKeys)
    return { record: null, charged: true }
  }
  const settled = await settle(deps, {
    reservation: c.reservation,
    record: c.record,
    held: c.held,
    tokenEstimate: c.tokenEstimate,
    tokenKeys: c.tokenKeys,
    now: c.now,
  })
  const record = settled ?? c.record
  const m = deps.metrics
  if (m) {
    m.tokens.add(record.usage.prompt_tokens, record.model, 'prompt')
    m.tokens.add(record.usage.completion_tokens, record.model, 'completion')
    m.cost.add(toUsd(record.cost), record.model)
  }
  return { record, charged: settled !== null }
}

export interface GenerationDeps extends MeteringDeps {
  now: () => number
  renewals: Renewals
  /** Held credits, tokens, cost and time to first byte are counted here when present. */
  metrics?: Metrics
}

export interface BeginGeneration {
  account: Account
  /** The key it was made with (its models, limits and spend); absent: the account's alone. */
  key?: ApiKeyRecord
  /** The model asked for (its slug keys the admission; the record names the deployment's model). */
  model: ServedModel
  /** Every deployment that may answer: the credit hold covers the dearest. */
  deployments: readonly Deployment[]
  /** The route it came in on, e.g. `/v1/chat/completions`. */
  api: string
  generationId: string
  streamed: boolean
  promptTokenBound: number
  outputTokenBound: number
  tokenEstimate: number
  /** The requests-per-minute limit already counted this request (see `admit`). */
  requestCounted?: boolean
  /** The request's pre-body admission, left to this one by its route (see PreAdmission). */
  preAdmission?: PreAdmission
  /** Called once with the record when the generation is settled (null when nothing was billed). */
  onRecord?: (record: GenerationRecord | null) => void
}

/**
 * A request's admission before its body, which its route left to the generation's (routes/admission.ts:
 * the body came with the headers). `admit` then counts the request in the same store call as the
 * hold, unless it already ran (before files were read, or another step that must not serve a refused
 * request).
 */
export interface PreAdmission {
  /** Runs it now (429/402 thrown), once. */
  run(): Promise<void>
  /** The generation's admission counts the request: nothing is left to run. */
  supersede(): void
  /** Whether it ran or was superseded. */
  readonly done: boolean
}

export interface Outcome {
  /** The deployment whose answer this is; the last one tried when none answered. */
  deployment: Deployment
  /** Usage as the upstream reported it; absent when it reported none (cut stream, cancelled). */
  usage?: Usage
  /** The upstream produced output (an answer, or at least one chunk). */
  produced: boolean
  /** The client went away before the answer ended. */
  cancelled: boolean
  finishReason: string | null
  /** Token counts when the usage has to be estimated; called only then. */
  estimate: () => Promise<{ promptTokens: number; completionTokens: number }>
}

export interface Generation {
  id: string
  /** X-RateLimit-* headers for the answer. */
  headers: Record<string, string>
  /** Marks the first byte of the answer (now, or at `at`); later calls are ignored. */
  firstByte(at?: number): void
  /** Adds an upstream call to the record's attempt list. */
  attempted(attempt: AttemptRecord): void
  /** The upstream calls so far. */
  readonly attempts: readonly AttemptRecord[]
  /** Records and settles once (later calls return the first result). Never throws. */
  finish(outcome: Outcome): Promise<GenerationRecord | null>
  /**
   * Like `finish`, for an answer about to be delivered: throws 503 `store_unavailable` when its charge
   * could not be committed, so that no answer leaves without its charge (the record is in the log).
   */
  finishBeforeDelivery(outcome: Outcome): Promise<GenerationRecord | null>
}

/**
 * Admits the generation (throws 429/402 before anything reaches an upstream) and keeps its
 * reservation alive, renewing it every third of its TTL, until `finish`.
 */
export async function beginGeneration(deps: GenerationDeps, b: BeginGeneration): Promise<Generation> {
  const startedAt = deps.now()
  // Run already (counted), or counted by this admission from here on.
  const counted = b.requestCounted === true || b.preAdmission?.done === true
  b.preAdmission?.supersede()
  const admission = await holdGeneration(deps, {
    account: b.account,
    key: b.key,
    slug: b.model.slug,
    deployments: b.deployments,
    generationId: b.generationId,
    costBound: costBound(b.model.type, b.deployments, b.promptTokenBound, b.outputTokenBound),
    tokenEstimate: b.tokenEstimate,
    ttlMs: deps.config.limits.reservationTtlMs,
    now: startedAt,
    requestCounted: counted,
  })
  const reservation = { id: admission.reservation.id, accountId: admission.reservation.accountId }
  const stopRenewing = deps.renewals.hold(reservation)
  const held = toUsd(admission.reservation.amount)
  deps.metrics?.reserved.inc(held)

  let firstByteAt: number | undefined
  const attempts: AttemptRecord[] = []
  let finished: Promise<GenerationRecord | null> | undefined
  /** False once a charge could not be committed (logged with its record for replay). */
  let charged = true

  async function end(o: Outcome): Promise<GenerationRecord | null> {
    stopRenewing()
    const endedAt = deps.now()
    if (!o.produced && !o.cancelled) {
      // Nothing was produced (every upstream failed first): nothing to bill or record.
      await closeGeneration(deps, {
        reservation,
        record: null,
        tokenEstimate: admission.tokenEstimate,
        tokenKeys: admission.tokenKeys,
        now: endedAt,
      })
      return null
    }
    let usage: GenerationUsage
    let costSource: 'upstream' | 'estimate' = 'upstream'
    if (hasUsage(o.usage)) usage = normalizeUsage(o.usage)
    else {
      costSource = 'estimate'
      // A failing count must not skip the charge: bytes/4, the usual rule of thumb, stands in.
      const counted = await o.estimate().catch((err: unknown) => {
        deps.log.error({ err, generationId: b.generationId }, 'token estimate failed; billing bytes/4')
        return { promptTokens: Math.ceil(b.promptTokenBound / 4), completionTokens: 0 }
      })
      usage = normalizeUsage({
        prompt_tokens: counted.promptTokens,
        completion_tokens: counted.completionTokens,
      })
    }
    const billable: BillableUsage =
      b.model.type === 'embedding'
        ? { kind: 'embedding', promptTokens: usage.prompt_tokens }
        : { kind: 'tokens', usage }
    const record = buildRecord({
      generationId: b.generationId,
      accountId: b.account.id,
      keyHash: b.key?.hash,
      api: b.api,
      slug: o.deployment.slug,
      deployment: o.deployment,
      startedAt,
      endedAt,
      firstByteAt,
      streamed: b.streamed,
      finishReason: o.finishReason,
      cancelled: o.cancelled,
      costSource,
      usage,
      billable,
      discountPpm: discountFor(b.account, o.deployment.slug),
      attempts,
    })
    // Charged at most the hold plus the account's overdraft; the rest is the record's unbilled overage.
    const closed = await closeGeneration(deps, {
      reservation,
      record,
      held: admission.reservation.amount,
      tokenEstimate: admission.tokenEstimate,
      tokenKeys: admission.tokenKeys,
      now: endedAt,
    })
    charged = closed.charged
    // Low balance or key-limit notices, when the account asked for them: queued after the charge and
    // before the answer is delivered (two store calls, only for such accounts; it never throws).
    if (charged && wantsNotices(b.account, b.key)) await checkNotices(deps, b.account, b.key, endedAt)
    return closed.record
  }

  const generation: Generation = {
    id: b.generationId,
    headers: admission.headers,
    firstByte(at) {
      firstByteAt ??= at ?? deps.now()
    },
    attempted(attempt) {
      attempts.push(attempt)
    },
    attempts,
    finish(outcome) {
      finished ??= end(outcome)
        .catch((err: unknown) => {
          // end stopped the renewals before anything that can throw.
          charged = false
          deps.log.error({ err, generationId: b.generationId }, 'could not record or settle a generation')
          return null
        })
        .then((record) => {
          observe(deps.metrics, held, record)
          b.onRecord?.(record)
          return record
        })
      return finished
    },
    async finishBeforeDelivery(outcome) {
      const record = await generation.finish(outcome)
      if (!charged) {
        throw new GatewayError(
          'store_unavailable',
          'the answer could not be billed, so it was not delivered; retry',
        )
      }
      return record
    },
  }
  return generation
}

function observe(metrics: Metrics | undefined, held: number, r: GenerationRecord | null): void {
  if (!metrics) return
  metrics.reserved.dec(held)
  // Tokens and cost are counted where the charge is made (closeGeneration).
  if (!r) return
  metrics.ttfb.observeAt(r.latencyMs / 1000, r.model, r.provider)
}

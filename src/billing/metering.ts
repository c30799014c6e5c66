import type { Logger } from 'pino'
import { assertModelAllowed } from '../auth/keys.ts'
import type { LimitsConfig } from './config.ts'
import { GatewayError } from '../errors.ts'
import type { KeyHold, RateCheck, RateDecision, Reservation, ReservationRef, Store } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import type { AttemptRecord, CostSource, GenerationRecord, GenerationUsage } from '../domain/records.ts'
import type { Metrics } from '../metrics.ts'
import { applyPpm, toUsd } from './money.ts'
import { priceUsage } from './prices.ts'
import type { SpareHolds } from './spare-holds.ts'
import type { Usage } from '../domain/chat.ts'
import type { Deployment, ModelType } from '../domain/models.ts'
import type { Money } from '../domain/money.ts'
import type { BillableUsage } from '../domain/prices.ts'

// Metering in three separate steps, each usable on its own:
// - admission (`admit`): rate limits, then a credit reservation, before anything reaches an upstream;
// - pricing (`priceUsage` in prices.ts, `buildRecord` here): pure functions of plain data;
// - settlement (`settle`/`release`): plain data and a reservation id, so whoever ends the work (the
//   request itself, a task poller, another process) can settle it.

export const RATE_WINDOW_MS = 60_000

export interface MeteringDeps {
  store: Store
  /** Metering reads only the limits slice: default rate limits, the reservation TTL. */
  config: { limits: LimitsConfig }
  log: Logger
  /** Failures of settlement, for metrics and alerts. */
  stats: MeteringStats
  /** Unbilled overage is counted here when present. */
  metrics?: Metrics
  /** Holds taken ahead for busy accounts (spare-holds.ts); absent: every request holds on its own. */
  spares?: SpareHolds
}

export interface MeteringStats {
  /** Settlements that failed after every retry: a charge that was logged but not written. */
  settleFailures: number
  /** Settlement attempts that failed and were retried. */
  settleRetries: number
  /**
   * Answers whose upstream went past the output limit it was sent (a stream is cut; the charge is
   * capped at the hold, the rest recorded as unbilled overage; logged).
   */
  outputOverruns: number
}

export function createMeteringStats(): MeteringStats {
  return { settleFailures: 0, settleRetries: 0, outputOverruns: 0 }
}

export interface AdmitRequest {
  account: Account
  /**
   * The key the request was made with: its allowed models (403), rate limits and spending limit
   * (402 `key_limit_exceeded`) apply on top of the account's.
   */
  key?: ApiKeyRecord
  /**
   * The hold names the key even without a limit, so that a settle from elsewhere (a prediction's,
   * whose record is built from its task) charges the key too.
   */
  holdKey?: boolean
  slug: string
  generationId: string
  /** Upper bound of the request's upstream cost before discount (see `costBound`). */
  costBound: Money
  /** Discount applied to the hold; the account's for `slug` when absent. */
  discountPpm?: number
  /** What the tokens-per-minute limit counts before the answer is known. */
  tokenEstimate: number
  /** How long the reservation holds without renewal. */
  ttlMs: number
  now: number
  /**
   * The requests-per-minute limit already counted this request (`admitRequest`, before its body was
   * read): only the tokens-per-minute limit is checked here, so no request counts twice.
   */
  requestCounted?: boolean
}

export interface Admission {
  reservation: Reservation
  discountPpm: number
  /**
   * The tokens the tokens-per-minute limit counted for this request, corrected when it ends; null when
   * the account has no such limit (nothing was counted, so there is nothing to correct).
   */
  tokenEstimate: number | null
  /** The tokens-per-minute windows that counted it (the account's, the key's), corrected when it ends. */
  tokenKeys: string[]
  /** X-RateLimit-* headers for the answer. */
  headers: Record<string, string>
}

const tpmKey = (accountId: string) => `tpm:${accountId}`
const rpmKey = (accountId: string) => `rpm:${accountId}`
// A key's own windows, apart from any account's.
const keyTpmKey = (keyHash: string) => `ktpm:${keyHash}`
const keyRpmKey = (keyHash: string) => `krpm:${keyHash}`
const scopeOf = (check: RateCheck | undefined): RateScope =>
  check?.key.startsWith('rpm:')
    ? 'account-requests'
    : check?.key.startsWith('krpm:')
      ? 'key-requests'
      : check?.key.startsWith('ktpm:')
        ? 'key-tokens'
        : 'account-tokens'

/** What a request made with `key` holds against the key's limit; undefined: nothing of the key. */
function keyHoldOf(key: ApiKeyRecord | undefined, always: boolean): KeyHold | undefined {
  if (!key) return undefined
  const limit = key.limit ?? null
  if (limit === null && !always) return undefined
  return { hash: key.hash, limit, limitReset: key.limitReset ?? null }
}

/** The account's discount on this model: a per-model discount wins over the account's own. */
export function discountFor(account: Account, slug: string): number {
  return account.modelDiscountsPpm[slug] ?? account.discountPpm
}

/**
 * Throws 429 (a per-minute limit) or 402 (no credits left); otherwise holds the discounted cost bound.
 * Both limits are checked in one all-or-nothing step (only the tokens one with `requestCounted`). A request refused with 402 has passed the rate
 * limits and still counts in them: it was a request, and undoing it would cost another round trip.
 */
export async function admit(deps: MeteringDeps, r: AdmitRequest): Promise<Admission> {
  const { store, config } = deps
  assertModelAllowed(r.key, r.slug)
  const defaults = config.limits.defaultRateLimits
  const rpmLimit = r.account.rateLimits.requestsPerMinute ?? defaults.requestsPerMinute
  const tpmLimit = r.account.rateLimits.tokensPerMinute ?? defaults.tokensPerMinute
  const keyRpm = r.key?.rateLimits?.requestsPerMinute
  const keyTpm = r.key?.rateLimits?.tokensPerMinute
  const checks: RateCheck[] = []
  if (rpmLimit !== undefined && r.requestCounted !== true)
    checks.push({ key: rpmKey(r.account.id), amount: 1, limit: rpmLimit })
  if (keyRpm !== undefined && r.requestCounted !== true)
    checks.push({ key: keyRpmKey(r.key!.hash), amount: 1, limit: keyRpm })
  const tokenKeys: string[] = []
  if (tpmLimit !== undefined) tokenKeys.push(tpmKey(r.account.id))
  if (keyTpm !== undefined) tokenKeys.push(keyTpmKey(r.key!.hash))
  for (const key of tokenKeys) {
    checks.push({ key, amount: r.tokenEstimate, limit: key.startsWith('k') ? keyTpm! : tpmLimit! })
  }
  const discountPpm = r.discountPpm ?? discountFor(r.account, r.slug)
  const bound = r.costBound - applyPpm(r.costBound, discountPpm)
  const keyHold = keyHoldOf(r.key, r.holdKey === true)
  // Nothing to count but the hold: one taken ahead will do (spare-holds.ts), with no store call.
  const spare =
    checks.length === 0 && keyHold === undefined ? deps.spares?.take(r.account.id, bound, r.now) : undefined
  if (spare) return { reservation: spare, discountPpm, tokenEstimate: null, tokenKeys, headers: {} }
  // One store call: the limits, then (when they allow it) the hold, bounded by the key's limit too.
  const admitted = await store.admission.reserve(
    checks,
    RATE_WINDOW_MS,
    r.account.id,
    r.generationId,
    bound,
    r.now,
    r.ttlMs,
    keyHold,
  )
  const { allowed, decisions } = admitted
  let { reservation, keyLimited } = admitted
  // Held short or refused for credits while this instance holds some of them ahead: those go back
  // first, and the hold is taken again (the limits counted the request already).
  if (
    allowed &&
    !keyLimited &&
    (reservation === null || reservation.amount < bound) &&
    (await deps.spares?.giveBack(r.account.id)) === true
  ) {
    // A hold taken again under its id would count the one before against itself: that one goes first.
    if (reservation) await store.ledger.release(reservation)
    ;({ reservation, keyLimited } = keyHold
      ? await store.ledger.reserveForKey(r.account.id, r.generationId, bound, r.now, r.ttlMs, keyHold)
      : {
          reservation: await store.ledger.reserve(r.account.id, r.generationId, bound, r.now, r.ttlMs),
          keyLimited,
        })
  }
  let headers: Record<string, string> = {}
  if (checks.length > 0) {
    if (!allowed) {
      const i = decisions.findIndex((d) => !d.allowed)
      const refused = decisions[i] ?? (decisions[0] as RateDecision)
      throw rateLimited(scopeOf(checks[i]), refused, r.now)
    }
    // The answer's X-RateLimit-* describe the requests limit when there is one (set at its check).
    if (rpmLimit === undefined || r.requestCounted !== true)
      headers = rateHeaders(decisions[0] as RateDecision, r.now)
  }
  if (!reservation) {
    if (keyLimited) throw keyLimitExceeded(r.key!)
    throw new GatewayError('insufficient_credits', 'the account has no credits left')
  }
  return {
    reservation,
    discountPpm,
    tokenEstimate: tokenKeys.length === 0 ? null : r.tokenEstimate,
    tokenKeys,
    headers,
  }
}

function keyLimitExceeded(key: ApiKeyRecord): GatewayError {
  const reset = key.limitReset ? ` (it starts over ${RESET_WHEN[key.limitReset]})` : ''
  return new GatewayError(
    'key_limit_exceeded',
    `this API key has spent its limit of $${toUsd(key.limit ?? 0n)}${reset}`,
  )
}

const RESET_WHEN = {
  daily: 'at 00:00 UTC',
  weekly: 'on Monday 00:00 UTC',
  monthly: 'on the 1st at 00:00 UTC',
} as const

export interface RequestAdmission {
  /** X-RateLimit-* headers of the requests-per-minute limit ({} when the account has none). */
  headers: Record<string, string>
}

/**
 * What can be checked before a request's body is read (nothing of it is known yet): counts the request
 * against the requests-per-minute limit (429), then refuses with 402 an account with nothing left to
 * hold (credits − usage − open reservations not above zero). The exact reservation waits for the body
 * (`admit`, with `requestCounted`). Like `admit`, a 402 still counts as a request.
 */
export async function admitRequest(
  deps: Pick<MeteringDeps, 'store' | 'config' | 'spares'>,
  account: Account,
  now: number,
  check: { credits: boolean } = { credits: true },
  key?: ApiKeyRecord,
): Promise<RequestAdmission> {
  const limit = account.rateLimits.requestsPerMinute ?? deps.config.limits.defaultRateLimits.requestsPerMinute
  const keyLimit = key?.rateLimits?.requestsPerMinute
  const checks: RateCheck[] = []
  if (limit !== undefined) checks.push({ key: rpmKey(account.id), amount: 1, limit })
  if (keyLimit !== undefined) checks.push({ key: keyRpmKey(key!.hash), amount: 1, limit: keyLimit })
  if (checks.length === 0 && !check.credits) return { headers: {} }
  // One store call: the limits, then (when they allow the request) whether anything is left to hold.
  const { allowed, decisions, hasCredits } = await deps.store.admission.beforeBody(
    account.id,
    checks,
    RATE_WINDOW_MS,
    now,
    check.credits,
  )
  let headers: Record<string, string> = {}
  if (checks.length > 0) {
    if (!allowed) {
      const i = decisions.findIndex((d) => !d.allowed)
      throw rateLimited(scopeOf(checks[i]), decisions[i] ?? (decisions[0] as RateDecision), now)
    }
    headers = rateHeaders(decisions[0] as RateDecision, now)
  }
  if (hasCredits === false && !(await hasCreditsAfterGiveBack(deps, account.id, now))) {
    throw new GatewayError('insufficient_credits', 'the account has no credits left')
  }
  return { headers }
}

/** After this instance gave back the account's holds taken ahead (if any): whether anything is left. */
async function hasCreditsAfterGiveBack(
  deps: Pick<MeteringDeps, 'store' | 'spares'>,
  accountId: string,
  now: number,
): Promise<boolean> {
  if ((await deps.spares?.giveBack(accountId)) !== true) return false
  const c = await deps.store.ledger.credits(accountId, now)
  return c.totalCredits - c.totalUsage - c.reserved > 0n
}

/**
 * The most a chat or embeddings request can cost before discount, whichever deployment answers:
 * every prompt and output token at that deployment's dearest price, the dearest deployment.
 */
export function costBound(
  type: ModelType,
  deployments: readonly Deployment[],
  promptTokens: number,
  outputTokens: number,
): Money {
  let bound = 0n
  for (const d of deployments) {
    const p = d.price
    const b =
      type === 'embedding'
        ? BigInt(promptTokens) * p.embedding
        : BigInt(promptTokens) * max(p.prompt, p.cacheWrite, p.cachedPrompt, p.audioPrompt) +
          BigInt(outputTokens) * max(p.completion, p.reasoning, p.audioCompletion)
    if (b > bound) bound = b
  }
  return bound
}

const max = (...v: bigint[]): bigint => v.reduce((a, b) => (b > a ? b : a))

export interface RecordInput {
  generationId: string
  accountId: string
  /** The hash of the key that made it. */
  keyHash?: string
  api: string
  slug: string
  deployment: Deployment
  startedAt: number
  endedAt: number
  firstByteAt: number | undefined
  streamed: boolean
  finishReason: string | null
  cancelled: boolean
  costSource: CostSource
  usage: GenerationUsage
  billable: BillableUsage
  discountPpm: number
  /** The upstream calls made, in order. */
  attempts?: AttemptRecord[]
}

/** The generation record of a finished request, priced at the deployment that answered. Pure. */
export function buildRecord(i: RecordInput): GenerationRecord {
  const upstreamCost = priceUsage(i.billable, i.deployment.price)
  const discount = applyPpm(upstreamCost, i.discountPpm)
  return {
    generationId: i.generationId,
    accountId: i.accountId,
    api: i.api,
    model: i.slug,
    provider: i.deployment.provider,
    createdAt: i.startedAt,
    generationTimeMs: i.endedAt - i.startedAt,
    latencyMs: (i.firstByteAt ?? i.endedAt) - i.startedAt,
    streamed: i.streamed,
    finishReason: i.finishReason,
    cancelled: i.cancelled,
    costSource: i.costSource,
    usage: i.usage,
    upstreamCost,
    discountPpm: i.discountPpm,
    discount,
    cost: upstreamCost - discount,
    ...(i.attempts && i.attempts.length > 0 ? { attempts: i.attempts } : {}),
    ...(i.keyHash !== undefined ? { keyHash: i.keyHash } : {}),
  }
}

export interface Settlement {
  reservation: ReservationRef
  record: GenerationRecord
  /** What admission held for it: the charge is capped at this plus the account's overdraft. */
  held?: Money
  /** The token estimate admission counted, corrected to the actual total here; null: none was counted. */
  tokenEstimate: number | null
  /** The windows it was counted in (`Admission.tokenKeys`); absent: the account's. */
  tokenKeys?: readonly string[]
  now: number
}

const SETTLE_ATTEMPTS = 4

/**
 * Charges the record's cost, capped at its hold plus the account's overdraft (billing/overage.ts), and
 * stores the record as charged in one store step (idempotent per generation id), retrying a failing
 * store; never throws. Returns the record as charged (the one given for a repeat), or null when the
 * settlement failed: then it is logged at error level with the whole record (enough to replay it by
 * hand) and counted: a charge is never skipped silently.
 */
export async function settle(deps: MeteringDeps, s: Settlement): Promise<GenerationRecord | null> {
  // The tokens windows' correction is made with the charge, not after it: one store turn (the same
  // group commit, or statements in flight together) instead of one more round trip before the answer.
  const corrected = correctTokens(
    deps,
    s.record.accountId,
    s.tokenKeys ?? [tpmKey(s.record.accountId)],
    s.tokenEstimate === null ? 0 : s.record.usage.total_tokens - s.tokenEstimate,
    s.now,
  )
  /** The record as charged; null: a repeat, charged before. */
  let charged: GenerationRecord | null
  for (let attempt = 1; ; attempt++) {
    try {
      charged = await deps.store.ledger.settle(s.reservation, s.record, { held: s.held, now: s.now })
      // Holds ahead are taken after the charge, not with it: the answer does not wait for them.
      deps.spares?.ended(s.record.accountId, s.now)
      break
    } catch (err) {
      if (attempt >= SETTLE_ATTEMPTS) {
        deps.stats.settleFailures++
        deps.log.error(
          { err, generationId: s.record.generationId, record: recordForLog(s.record) },
          'UNSETTLED GENERATION: could not charge and record it; replay this record',
        )
        await corrected
        return null
      }
      deps.stats.settleRetries++
      deps.log.warn({ err, generationId: s.record.generationId, attempt }, 'settlement failed; retrying')
      await new Promise((resolve) => setTimeout(resolve, 50 * 4 ** (attempt - 1)))
    }
  }
  await corrected
  if (!charged) return s.record
  const over = charged.unbilledOverage
  if (over) {
    deps.metrics?.unbilledOverage.inc({ model: charged.model }, toUsd(over.usd))
    deps.metrics?.unbilledOverageTokens.inc({ model: charged.model }, over.tokens)
    deps.log.warn(
      {
        generationId: charged.generationId,
        accountId: charged.accountId,
        model: charged.model,
        unbilledUsd: toUsd(over.usd),
        unbilledTokens: over.tokens,
      },
      'usage priced past what the request could be charged: the rest is unbilled overage',
    )
  }
  return charged
}

/**
 * Nothing was produced: frees the reservation and takes the token estimate back (null: none was
 * counted). Never throws.
 */
export async function release(
  deps: MeteringDeps,
  reservation: ReservationRef,
  tokenEstimate: number | null,
  now: number,
  tokenKeys: readonly string[] = [tpmKey(reservation.accountId)],
): Promise<void> {
  const corrected = correctTokens(deps, reservation.accountId, tokenKeys, -(tokenEstimate ?? 0), now)
  try {
    await deps.store.ledger.release(reservation)
    deps.spares?.ended(reservation.accountId, now)
  } catch (err) {
    // The reservation then expires by its TTL.
    deps.log.warn({ err, reservation: reservation.id }, 'could not release a reservation')
  }
  await corrected
}

/** Adds `delta` tokens to each window, all at once. Never throws. */
function correctTokens(
  deps: MeteringDeps,
  accountId: string,
  keys: readonly string[],
  delta: number,
  now: number,
): Promise<unknown> {
  if (delta === 0) return Promise.resolve()
  return Promise.all(keys.map((key) => adjustTokens(deps, accountId, key, delta, now)))
}

async function adjustTokens(deps: MeteringDeps, accountId: string, key: string, delta: number, now: number) {
  try {
    await deps.store.rateLimits.adjust(key, delta, RATE_WINDOW_MS, now)
  } catch (err) {
    deps.log.warn({ err, accountId, window: key }, 'could not correct the tokens-per-minute count')
  }
}

function recordForLog(r: GenerationRecord) {
  return { ...r, upstreamCost: String(r.upstreamCost), discount: String(r.discount), cost: String(r.cost) }
}

const int = (v: unknown): number => (Number.isFinite(v) && (v as number) > 0 ? Math.floor(v as number) : 0)

/**
 * An upstream usage as the record keeps it: every field present, non-negative integers, and the total
 * the sum of prompt and completion (an upstream's own total is not trusted).
 */
export function normalizeUsage(
  u: Pick<
    Usage,
    'prompt_tokens' | 'completion_tokens' | 'prompt_tokens_details' | 'completion_tokens_details'
  > & {
    /** Ignored: the total is recomputed. */
    total_tokens?: number
  },
): GenerationUsage {
  const pd = u.prompt_tokens_details ?? {}
  const cd = u.completion_tokens_details ?? {}
  const prompt = int(u.prompt_tokens)
  const completion = int(u.completion_tokens)
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: {
      cached_tokens: int(pd.cached_tokens),
      cache_write_tokens: int(pd.cache_write_tokens),
      audio_tokens: int(pd.audio_tokens),
      video_tokens: int(pd.video_tokens),
    },
    completion_tokens_details: {
      reasoning_tokens: int(cd.reasoning_tokens),
      image_tokens: int(cd.image_tokens),
      audio_tokens: int(cd.audio_tokens),
    },
  }
}

/** True when the upstream reported a usage worth billing (some tokens either way). */
export function hasUsage(u: Usage | undefined): u is Usage {
  return u !== undefined && int(u.prompt_tokens) + int(u.completion_tokens) > 0
}

function rateHeaders(d: RateDecision, t: number): Record<string, string> {
  return {
    'x-ratelimit-limit': String(d.limit),
    'x-ratelimit-remaining': String(d.remaining),
    'x-ratelimit-reset': String(Math.max(0, Math.ceil((d.resetAt - t) / 1000))),
  }
}

type RateScope = 'account-requests' | 'account-tokens' | 'key-requests' | 'key-tokens'

function rateLimited(scope: RateScope, d: RateDecision, t: number): GatewayError {
  const headers = rateHeaders(d, t)
  headers['retry-after'] = String(Math.max(1, Math.ceil((d.resetAt - t) / 1000)))
  // Tells this 429 (the account's or the key's own limit) from an upstream's (`x-ratelimit-scope: upstream`).
  headers['x-ratelimit-scope'] = scope
  const [whose, what] = scope.split('-') as [string, string]
  return new GatewayError(
    'rate_limit_exceeded',
    `the ${whose === 'key' ? 'API key' : 'account'}'s rate limit of ${d.limit} ${what} per minute is reached`,
    { headers },
  )
}

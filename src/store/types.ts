import type { FileStore } from './files.ts'
import type { OutputStore, SecretStore, TaskStore, WebhookStore } from './tasks.ts'
import type { ResponseStore } from './responses.ts'
import type { Money } from '../billing/money.ts'

// The state interfaces. Routes and services only see these; memory.ts implements them for one
// instance, and SQL backends (SQLite, PostgreSQL) implement the same ones durably. Every method is async
// and every read-modify-write is one method, so a backend can make it one transaction. One contract
// suite (test/contract/store.ts) runs against every backend.
//
// Backends can be mixed: accounts, ledger, generations and files form one group (account creation
// opens the ledger, settle charges and records in one step), while rate limits are independent and
// may come from another backend (e.g. a shared fast counter in front of a SQL ledger).
//
// Times are the caller's `now` (Unix ms), never the backend's clock, so a test drives expiry.
//
// Money: amounts are bigint picodollars and must round-trip exactly. 1e9 USD (the most config gives
// an account; the admin API can add more) is 1e21 picodollars, beyond a 64-bit integer (9.22e18): a
// backend stores money in a column that holds it exactly (NUMERIC in SQL, a decimal string
// elsewhere), never BIGINT or a float.

export interface RateLimits {
  requestsPerMinute?: number
  tokensPerMinute?: number
}

export interface Account {
  id: string
  name: string
  createdAt: number
  /** Discount as parts per million of the upstream cost (750 000 = 75 % off). */
  discountPpm: number
  /** Per-model discounts (slug → ppm), taking precedence over `discountPpm`. */
  modelDiscountsPpm: Record<string, number>
  rateLimits: RateLimits
  /**
   * How far a request may be charged past its hold, and the account's balance go below zero, when the
   * upstream reports more than admission allowed for (picodollars); absent: 0.
   */
  overdraft?: Money
}

export interface ApiKeyRecord {
  id: string
  accountId: string
  /** SHA-256 of the key, lowercase hex; the key itself is never stored. */
  hash: string
  /** The first characters of the key, to tell keys apart in listings. */
  prefix: string
  createdAt: number
}

export interface AccountStore {
  /** The account owning the API key whose SHA-256 is `keyHash`, or null. */
  findByKeyHash(keyHash: string): Promise<Account | null>
  get(id: string): Promise<Account | null>
  /**
   * Creates the account and opens its ledger with `initialCredits`, atomically; false (and nothing
   * changed) when the id exists.
   */
  create(account: Account, initialCredits: Money): Promise<boolean>
  /** Applies a partial update; null when the account does not exist. */
  update(id: string, patch: Partial<Omit<Account, 'id' | 'createdAt'>>): Promise<Account | null>
  /** Oldest first (createdAt, then id). */
  list(): Promise<Account[]>
  /** Adds the key, or replaces the record of a key with the same hash (so re-adding is idempotent). */
  addKey(key: ApiKeyRecord): Promise<void>
  /** Oldest first. */
  listKeys(accountId: string): Promise<ApiKeyRecord[]>
  /** Revokes one of the account's keys; false when it has no such key. */
  removeKey(accountId: string, keyId: string): Promise<boolean>
}

export interface Credits {
  totalCredits: Money
  totalUsage: Money
  /** Sum of the open (unexpired) reservations. */
  reserved: Money
}

export interface ReservationRef {
  /** The generation id of the request holding it; unique per account. */
  id: string
  accountId: string
}

export interface Reservation extends ReservationRef {
  amount: Money
  /** Unix ms from which it no longer holds anything. */
  expiresAt: number
}

/**
 * Credits, usage and reservations of the accounts. A ledger exists exactly for the accounts that
 * `AccountStore.create` made: `credits` of an unknown account is all zero and `reserve` refuses it;
 * `addCredits` and `settle` throw for it.
 */
export interface LedgerStore {
  credits(accountId: string, now: number): Promise<Credits>
  addCredits(accountId: string, amount: Money, now: number): Promise<Credits>
  /**
   * Atomically: refuse (null) when credits − usage − open reservations is not above zero; otherwise
   * hold min(upperBound, that available amount) until `now + ttlMs`.
   */
  reserve(
    accountId: string,
    id: string,
    upperBound: Money,
    now: number,
    ttlMs: number,
  ): Promise<Reservation | null>
  /** Extends an open reservation to `now + ttlMs`; false when it is gone (settled, released or expired). */
  renew(reservation: ReservationRef, now: number, ttlMs: number): Promise<boolean>
  /**
   * Atomically: drops the reservation (if still there), charges the account `record.cost` capped by
   * `capCharge(record, chargeCeiling(…))` (billing/overage.ts: at most the hold plus the account's
   * overdraft, and the balance less the other open holds not below −overdraft) and stores the record
   * as charged, which it returns. The hold is `limit.held`, else the reservation's stored amount, else
   * unknown. Exactly once per generationId: a second settle with the same generationId changes nothing
   * and returns null. Works with an expired or unknown reservation too (the cost is still charged: a
   * request that outlived its hold is billed, never lost).
   */
  settle(
    reservation: ReservationRef,
    record: GenerationRecord,
    limit?: SettleLimit,
  ): Promise<GenerationRecord | null>
  /** Drops the reservation; nothing when it is already gone. */
  release(reservation: ReservationRef): Promise<void>
}

export interface SettleLimit {
  /** What admission held for the request, when the caller knows it. */
  held?: Money
  /** Unix ms: which of the account's other holds are still open. */
  now?: number
}

export type CostSource = 'upstream' | 'estimate'

export interface GenerationUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details: {
    cached_tokens: number
    cache_write_tokens: number
    audio_tokens: number
    video_tokens: number
  }
  completion_tokens_details: { reasoning_tokens: number; image_tokens: number; audio_tokens: number }
}

/** One upstream call made for a generation (the answering one is the last). */
export interface AttemptRecord {
  /** The configured provider (`openai`, …) and the deployment id within the model. */
  provider: string
  deployment: string
  /** The model slug it was a deployment of (differs from the record's model for a fallback). */
  model: string
  /** The upstream's HTTP status; null when none came (connection refused, timeout). */
  status: number | null
  /** `ok`, or the gateway error code the failure mapped to. */
  outcome: string
  /** Unix ms when the call started. */
  startedAt: number
  durationMs: number
}

export interface GenerationRecord {
  generationId: string
  accountId: string
  api: string
  model: string
  provider: string
  createdAt: number
  generationTimeMs: number
  latencyMs: number
  streamed: boolean
  finishReason: string | null
  cancelled: boolean
  costSource: CostSource
  usage: GenerationUsage
  upstreamCost: Money
  discountPpm: number
  discount: Money
  cost: Money
  /**
   * What the upstream's usage priced beyond the charge's bound (cost after discount, not charged), and
   * the tokens it stands for; absent when nothing was left unbilled.
   */
  unbilledOverage?: { usd: Money; tokens: number }
  /** Every upstream call, in order; absent on records written before attempts were kept. */
  attempts?: AttemptRecord[]
}

export interface GenerationPage {
  data: GenerationRecord[]
  /** Pass as `before` for the next (older) page; null on the last page. */
  nextCursor: string | null
}

/** Reads only: records are written by `LedgerStore.settle`, together with their charge. */
export interface GenerationStore {
  get(generationId: string): Promise<GenerationRecord | null>
  /**
   * The account's records, newest (most recently settled) first. `before` is a `nextCursor`; an
   * unknown one gives an empty page.
   */
  listByAccount(accountId: string, options: { limit: number; before?: string }): Promise<GenerationPage>
}

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Unix ms when the window that decides the answer ends. */
  resetAt: number
}

export interface RateCheck {
  key: string
  amount: number
  limit: number
}

export interface RateLimitStore {
  /** Deletes windows that can no longer count (older than two windows). */
  sweep(now: number): Promise<void>
  /**
   * All-or-nothing over every check (sliding one-window counters): when all fit, counts all and
   * `allowed` is true; otherwise counts nothing. `decisions[i]` answers `checks[i]`: its `allowed`
   * says whether that check fits, its `remaining` is what is left after this call.
   */
  consume(
    checks: readonly RateCheck[],
    windowMs: number,
    now: number,
  ): Promise<{ allowed: boolean; decisions: RateDecision[] }>
  /** Corrects an earlier estimate by `delta` (may be negative) in the current window. */
  adjust(key: string, delta: number, windowMs: number, now: number): Promise<void>
}

/** What `AdmissionStore.beforeBody` found. */
export interface BeforeBodyOutcome {
  /** As `RateLimitStore.consume`. */
  allowed: boolean
  decisions: RateDecision[]
  /**
   * Whether the account has anything left to hold (credits − usage − open reservations above zero);
   * null when the limits refused the request or credits were not asked for.
   */
  hasCredits: boolean | null
}

/** What `AdmissionStore.reserve` did. */
export interface AdmitOutcome {
  /** As `RateLimitStore.consume`. */
  allowed: boolean
  decisions: RateDecision[]
  /** As `LedgerStore.reserve`; null too when the limits refused the request (nothing is held). */
  reservation: Reservation | null
}

/**
 * The steps of a request's admission, each one store call (one round trip, one transaction where the
 * backend has them) instead of two in a row: the hot path of every request.
 */
export interface AdmissionStore {
  /**
   * Before the body: `rateLimits.consume(checks, windowMs, now)`, then, when that allowed the request
   * and `credits` is true, whether `accountId` has anything left to hold. Like the two calls in a row:
   * a request refused for credits still counts in the limits.
   */
  beforeBody(
    accountId: string,
    checks: readonly RateCheck[],
    windowMs: number,
    now: number,
    credits: boolean,
  ): Promise<BeforeBodyOutcome>
  /**
   * `rateLimits.consume(checks, windowMs, now)`, then, when that allowed the request,
   * `ledger.reserve(accountId, id, upperBound, now, ttlMs)`. A request refused for credits still counts.
   */
  reserve(
    checks: readonly RateCheck[],
    windowMs: number,
    accountId: string,
    id: string,
    upperBound: Money,
    now: number,
    ttlMs: number,
  ): Promise<AdmitOutcome>
}

/**
 * The config file's values last applied to each account, as an opaque string (JSON) the caller
 * writes: at start, a field is applied only when the file changed it since (src/deps.ts).
 */
export interface AppliedConfigStore {
  get(accountId: string): Promise<string | null>
  set(accountId: string, snapshot: string): Promise<void>
}

export interface Store {
  accounts: AccountStore
  files: FileStore
  ledger: LedgerStore
  generations: GenerationStore
  rateLimits: RateLimitStore
  admission: AdmissionStore
  /** Without it, the config file's account fields are applied at every start (the file wins). */
  appliedConfig?: AppliedConfigStore
  /** Asynchronous predictions (store/tasks.ts): tasks, hosted outputs, webhook deliveries, secrets. */
  tasks: TaskStore
  outputs: OutputStore
  webhooks: WebhookStore
  secrets: SecretStore
  /** Stored Responses API answers (store/responses.ts). */
  responses: ResponseStore
  /** Resolves when the backend can serve requests (readiness). */
  ping(): Promise<void>
  /** Statements sent to the database so far, by kind (a backend that counts them). */
  statements?(): ReadonlyMap<string, number>
  /**
   * Housekeeping, run periodically: deletes reservations, upload holds and rate-limit windows that
   * expired before `now` (they already count for nothing; this only frees their space).
   */
  sweep(now: number): Promise<void>
  close(): Promise<void>
}

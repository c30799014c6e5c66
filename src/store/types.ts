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
  /** Where and when the account is told of a low balance or a key near its limit; absent: never. */
  notices?: AccountNotices
}

export interface AccountNotices {
  /** The URL signed `balance.low` and `key.limit.low` events are posted to; null: none are sent. */
  url: string | null
  /** `balance.low` is sent when the balance falls to or below this (picodollars); null: never. */
  balanceLow: Money | null
}

/** When a key's spending limit starts over: at 00:00 UTC, each Monday 00:00 UTC, each 1st 00:00 UTC. */
export type LimitReset = 'daily' | 'weekly' | 'monthly'

export interface ApiKeyRecord {
  id: string
  accountId: string
  /** SHA-256 of the key, lowercase hex; the key itself is never stored. */
  hash: string
  /** The first characters of the key, to tell keys apart in listings. */
  prefix: string
  createdAt: number
  // The key's settings. Absent means the default: no name, no limit, never expires, enabled, every
  // model, only the account's rate limits, an inference key.
  name?: string
  /** Spending limit (picodollars, charges after discount) per `limitReset` window; null: none. */
  limit?: Money | null
  /** null: the limit counts every charge since the key was made. */
  limitReset?: LimitReset | null
  /** Unix ms from which the key is refused; null: never. */
  expiresAt?: number | null
  disabled?: boolean
  /** Model slugs or patterns (`anthropic/*`) the key may call; null: every model. */
  allowedModels?: string[] | null
  /** Per-key limits, on top of the account's. */
  rateLimits?: RateLimits
  /** A management key manages its account's keys and reads its usage; it never calls a model. */
  management?: boolean
  /** `key.limit.low` is sent when the limit's remainder falls to or below this (picodollars); null: never. */
  limitLow?: Money | null
  /** Unix ms of the last settings change; null: never changed. */
  updatedAt?: number | null
}

/** The settings a key's owner may change (`updateKey`). */
export type KeyPatch = Partial<
  Pick<
    ApiKeyRecord,
    | 'name'
    | 'limit'
    | 'limitReset'
    | 'expiresAt'
    | 'disabled'
    | 'allowedModels'
    | 'rateLimits'
    | 'limitLow'
    | 'updatedAt'
  >
>

/** What authentication found: the key's account and the key itself (its settings). */
export interface KeyLookup {
  account: Account
  key: ApiKeyRecord
}

/**
 * What a key has spent (picodollars, charged after discount), counted by `settle` in the same step as
 * the account's charge: every record of the key, and those created in the current UTC day, week
 * (from Monday) and month. `held` is its open reservations.
 */
export interface KeyUsage {
  total: Money
  daily: Money
  weekly: Money
  monthly: Money
  held: Money
}

/** The key a reservation is taken for, and its spending limit (checked in the same step as the balance). */
export interface KeyHold {
  hash: string
  limit: Money | null
  limitReset: LimitReset | null
}

export interface AccountStore {
  /** The account owning the API key whose SHA-256 is `keyHash`, or null. */
  findByKeyHash(keyHash: string): Promise<Account | null>
  /** The key whose SHA-256 is `keyHash` with its account (one lookup: every request makes it), or null. */
  findKey(keyHash: string): Promise<KeyLookup | null>
  /** One of the account's keys by its hash; null when the account has no such key. */
  getKey(accountId: string, keyHash: string): Promise<ApiKeyRecord | null>
  /** Changes one of the account's keys' settings; null when it has no such key. */
  updateKey(accountId: string, keyHash: string, patch: KeyPatch): Promise<ApiKeyRecord | null>
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
  /**
   * As `reserve`, for a request made with `key`: the reservation carries the key's hash (its settle
   * charges the key too), and, when the key has a limit, the hold is also at most what the key has
   * left in its current window (limit − spent − its open holds, read in the same atomic step).
   * `keyLimited`: refused because the key has nothing left (the account had).
   */
  reserveForKey(
    accountId: string,
    id: string,
    upperBound: Money,
    now: number,
    ttlMs: number,
    key: KeyHold,
  ): Promise<{ reservation: Reservation | null; keyLimited: boolean }>
  /** What each of the account's keys `keyHashes` has spent, at `now` (zeros for a key without charges). */
  keyUsage(accountId: string, keyHashes: readonly string[], now: number): Promise<KeyUsage[]>
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
  /**
   * The hash of the API key that made it (never the key). A settle given none takes its reservation's
   * (`reserveForKey`); absent when neither named one.
   */
  keyHash?: string
}

export interface GenerationPage {
  data: GenerationRecord[]
  /** Pass as `before` for the next (older) page; null on the last page. */
  nextCursor: string | null
}

/** One UTC day's records of one model, summed (GenerationStore.activity). */
export interface ActivityRow {
  /** Unix ms of the UTC midnight starting the day. */
  day: number
  model: string
  requests: number
  promptTokens: number
  completionTokens: number
  upstreamCost: Money
  cost: Money
}

/** Reads only: records are written by `LedgerStore.settle`, together with their charge. */
export interface GenerationStore {
  get(generationId: string): Promise<GenerationRecord | null>
  /**
   * The account's records, newest (most recently settled) first. `before` is a `nextCursor`; an
   * unknown one gives an empty page. `model`, `keyHash`: only the records of that model, made with
   * that key.
   */
  listByAccount(
    accountId: string,
    options: { limit: number; before?: string; model?: string; keyHash?: string },
  ): Promise<GenerationPage>
  /**
   * The account's records created in [since, until) (Unix ms), summed per UTC day and model, exactly
   * (money as picodollars); ordered by day, then model. Days without records have no row.
   */
  activity(accountId: string, since: number, until: number): Promise<ActivityRow[]>
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
  /** The reservation was refused because the key has nothing left (`LedgerStore.reserveForKey`). */
  keyLimited?: boolean
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
   * `ledger.reserve(accountId, id, upperBound, now, ttlMs)` (`ledger.reserveForKey` with `key`). A
   * request refused for credits still counts.
   */
  reserve(
    checks: readonly RateCheck[],
    windowMs: number,
    accountId: string,
    id: string,
    upperBound: Money,
    now: number,
    ttlMs: number,
    key?: KeyHold,
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

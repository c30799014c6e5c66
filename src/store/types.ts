import type { Account, ApiKeyRecord, KeyUsage, LimitReset } from '../domain/accounts.ts'
import type { GenerationRecord } from '../domain/records.ts'
import type { TaskRecord, TaskStatus } from '../domain/tasks.ts'
import type { Money } from '../domain/money.ts'
import type { MediaKind } from '../domain/media.ts'

// Every state interface; the nouns they keep (accounts and keys, generation records, tasks) are in
// domain/. Routes and services only see these; memory/ implements them for one instance, and SQL
// backends (SQLite, PostgreSQL) implement the same ones durably. Every method is async and every
// read-modify-write is one method, so a backend can make it one transaction. One contract suite
// (test/contract/store.ts) runs against every backend.
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
  /** Asynchronous predictions (below): tasks, hosted outputs, webhook deliveries, secrets. */
  tasks: TaskStore
  outputs: OutputStore
  webhooks: WebhookStore
  secrets: SecretStore
  /** Stored Responses API answers (below). */
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

// ---- File metadata
//
// File records and upload holds. The bytes themselves live in a FileStorage (src/files/storage.ts); a
// record points at them by `storageKey`.

export const FILE_PURPOSES = ['assistants', 'batch', 'fine-tune', 'vision', 'user_data'] as const
export type FilePurpose = (typeof FILE_PURPOSES)[number]

export interface StoredFile {
  /** `file-…`, the public id. */
  id: string
  accountId: string
  bytes: number
  /** Epoch milliseconds. */
  createdAt: number
  /** As the client sent it; metadata only, never part of a storage path. */
  filename: string
  purpose: FilePurpose
  /** The upload's media type, served back by the content endpoint and used in data URLs. */
  contentType: string
  /** The FileStorage object holding the bytes. */
  storageKey: string
}

export interface FileQuota {
  maxFiles: number
  maxBytes: number
}

export type FileReservation =
  | {
      ok: true
      token: string
      /** What the account may still store, uploads in progress aside. */ bytesLeft: number
    }
  | { ok: false; reason: 'files' | 'bytes' }

export interface FileListQuery {
  purpose?: FilePurpose
  /** Newest first unless `asc`. */
  order?: 'asc' | 'desc'
  /** Only files after this id, in the list's order (cursor pagination). */
  after?: string
  limit: number
}

export interface FileStore {
  /**
   * Holds one file slot of the account's quota for an upload in progress, so parallel uploads cannot
   * together exceed the file count. Every successful reservation ends in `commit` or `release`, or
   * expires at `now + ttlMs`, so an upload whose process died does not hold its slot forever.
   */
  reserve(accountId: string, quota: FileQuota, now: number, ttlMs: number): Promise<FileReservation>
  /**
   * Turns the reservation into the file record, checking the byte quota atomically with the insert.
   * False (and the reservation released) when the account's bytes would exceed `quota.maxBytes`, and
   * false (nothing else changed) when the reservation expired, was released or never existed.
   */
  commit(token: string, file: StoredFile, quota: FileQuota, now: number): Promise<boolean>
  /** Frees the reservation's slot; nothing when it is already gone (committed, released, expired). */
  release(token: string): Promise<void>
  /** The account's own file, or null (also for another account's id). */
  get(accountId: string, id: string): Promise<StoredFile | null>
  list(accountId: string, query: FileListQuery): Promise<{ files: StoredFile[]; hasMore: boolean }>
  /** Removes the account's own file record and returns it, or null. */
  delete(accountId: string, id: string): Promise<StoredFile | null>
  usage(accountId: string): Promise<{ files: number; bytes: number }>
  /** Which of `storageKeys` some file record points at (the orphan sweep keeps those bytes). */
  existingKeys(storageKeys: readonly string[]): Promise<Set<string>>
}

/**
 * A claim's per-account share: one account's backlog must not take every worker of an instance.
 * Each account gets at most `perAccount` leases minus what `busy` says the caller already works on
 * for it; accounts are served in turn (every account's oldest due item before any account's second),
 * and the result is handed back oldest first.
 */
export interface ClaimShare {
  perAccount: number
  /** Account id → items of that account the caller holds now. */
  busy: ReadonlyMap<string, number>
}

/** What `advance` may change (the deployment too: a task no upstream accepted may move to another). */
export type TaskPatch = Partial<
  Pick<
    TaskRecord,
    | 'provider'
    | 'deployment'
    | 'upstreamModel'
    | 'status'
    | 'upstreamState'
    | 'cancelUpstream'
    | 'outputs'
    | 'error'
    | 'nextRunAt'
    | 'runs'
    | 'updatedAt'
    | 'submitStartedAt'
    | 'attempts'
  >
>

export interface TaskStore {
  /**
   * Stores a new task. With an idempotency key: when the account already has a task with that key
   * created after `idempotencySince`, nothing is stored and that task is returned (`created: false`);
   * the caller compares its `requestHash`. Atomic, so two racing creates make one task.
   */
  create(task: TaskRecord, idempotencySince: number): Promise<{ task: TaskRecord; created: boolean }>
  /** The task, whoever owns it (routes check the owner), or null. */
  get(id: string): Promise<TaskRecord | null>
  /**
   * Leases up to `limit` tasks that need work: `processing` (or `cancelUpstream`) with `nextRunAt <=
   * now`, whose lease is free or expired. Each gets `leaseOwner = owner`, `leaseUntil = now + leaseMs`.
   * Oldest `nextRunAt` first. Two instances never get the same task while a lease holds.
   */
  claimDue(
    owner: string,
    now: number,
    leaseMs: number,
    limit: number,
    share?: ClaimShare,
  ): Promise<TaskRecord[]>
  /**
   * The account's task created with `idempotencyKey` after `since`, or null: a retry is answered
   * from it before anything is admitted or held.
   */
  findByIdempotencyKey(accountId: string, idempotencyKey: string, since: number): Promise<TaskRecord | null>
  /**
   * Applies `patch` and frees the lease, only if `owner` still holds it and the task is still in
   * `expectStatus` (a cancel in between wins). Returns the task after the change, or null when
   * nothing was changed.
   */
  advance(id: string, owner: string, expectStatus: TaskStatus, patch: TaskPatch): Promise<TaskRecord | null>
  /**
   * Records that a submit starts (`submitStartedAt = now`), keeping the lease: only if `owner` holds
   * it and the task is `processing` without an upstream state. False when nothing was written.
   */
  markSubmitting(id: string, owner: string, now: number): Promise<boolean>
  /**
   * The account's client cancels: a `processing` task becomes `cancelled` with `cancelUpstream` set
   * when `upstreamState` is not null (nextRunAt = now, so the runner cancels it upstream soon).
   * Returns the task after the call (unchanged when it was not processing), or null when the account
   * has no such task.
   */
  cancel(accountId: string, id: string, now: number): Promise<TaskRecord | null>
  /** Deletes finished tasks last updated before `before`; returns their outputs' ids. */
  sweep(before: number): Promise<string[]>
  /**
   * The account's tasks, newest (last created) first. `before` is a `nextCursor` (a task id of the
   * account); an unknown one gives an empty page.
   */
  listByAccount(accountId: string, options: { limit: number; before?: string }): Promise<TaskPage>
}

export interface TaskPage {
  data: TaskRecord[]
  /** Pass as `before` for the next (older) page; null on the last page. */
  nextCursor: string | null
}

export interface StoredOutput {
  /** `out_` + random url-safe characters. */
  id: string
  taskId: string
  accountId: string
  type: MediaKind
  contentType: string
  bytes: number
  /** The FileStorage object holding the bytes. */
  storageKey: string
  createdAt: number
  /** Deleted (bytes and record) by housekeeping after this. */
  expiresAt: number
}

export interface OutputStore {
  /** Stores the record; replacing one with the same id is allowed (a retried finish). */
  put(output: StoredOutput): Promise<void>
  get(id: string): Promise<StoredOutput | null>
  /** Removes and returns up to `limit` records whose `expiresAt <= now` (the caller deletes the bytes). */
  takeExpired(now: number, limit: number): Promise<StoredOutput[]>
  /** Which of `storageKeys` some output record points at (the orphan sweep keeps those bytes). */
  existingKeys(storageKeys: readonly string[]): Promise<Set<string>>
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed'

export interface WebhookDelivery {
  /** The `webhook-id` header: `msg_` + the task id + the event; stable across retries. */
  id: string
  taskId: string
  accountId: string
  url: string
  /** The exact JSON body sent on every attempt. */
  body: string
  status: DeliveryStatus
  /** Attempts made so far. */
  attempts: number
  nextAttemptAt: number
  lastError: string | null
  leaseOwner: string
  leaseUntil: number
  createdAt: number
}

export interface WebhookStore {
  /** Adds the delivery; nothing when one with the same id exists (a finish that runs twice sends once). */
  enqueue(delivery: WebhookDelivery): Promise<void>
  /** Like TaskStore.claimDue, for `pending` deliveries with `nextAttemptAt <= now`. */
  claimDue(
    owner: string,
    now: number,
    leaseMs: number,
    limit: number,
    share?: ClaimShare,
  ): Promise<WebhookDelivery[]>
  /** Records an attempt's result and frees the lease, only if `owner` still holds it. */
  record(
    id: string,
    owner: string,
    result: Pick<WebhookDelivery, 'status' | 'attempts' | 'nextAttemptAt' | 'lastError'>,
  ): Promise<boolean>
  get(id: string): Promise<WebhookDelivery | null>
  /** The deliveries of one task, oldest first (tests and the admin view). */
  listByTask(taskId: string): Promise<WebhookDelivery[]>
  /** The account's last `limit` deliveries, newest (last enqueued) first. */
  listByAccount(accountId: string, limit: number): Promise<WebhookDelivery[]>
}

export interface SecretStore {
  /**
   * The secret named `name`; when there is none, `create()` is stored and returned. Atomic: two
   * instances starting at once agree on one value.
   */
  getOrCreate(name: string, create: () => string): Promise<string>
  get(name: string): Promise<string | null>
  set(name: string, value: string): Promise<void>
}

/** The prediction stores, as each backend hands them out together. */
export interface TaskStores {
  tasks: TaskStore
  outputs: OutputStore
  webhooks: WebhookStore
  secrets: SecretStore
}

// ---- Stored responses
//
// Stored Responses API answers (POST /v1/responses with `store`, the default): what a later request's
// `previous_response_id` continues, and what GET/DELETE /v1/responses/{id} read (each backend's is
// small: one table, read and written whole).
// Retention is the generation records' (`database.retentionDays`): the backends' sweep deletes both.

export interface StoredResponse {
  /** `resp_…` */
  id: string
  accountId: string
  /** Unix ms. */
  createdAt: number
  /** The conversation this answer followed, as Responses input items (earlier turns included). */
  input: unknown[]
  /** The Response object as it was answered. */
  response: Record<string, unknown>
}

export interface ResponseStore {
  /** Stores it; a second put of the same id replaces it. */
  put(r: StoredResponse): Promise<void>
  /** Null when there is none of that id for that account (another account's is null too). */
  get(accountId: string, id: string): Promise<StoredResponse | null>
  /** False when there was none of that id for that account. */
  delete(accountId: string, id: string): Promise<boolean>
  /** Deletes the ones created before `cutoff` (retention). */
  deleteBefore(cutoff: number): Promise<void>
}

import type { JsonValue, MediaFamily, MediaKind } from '../providers/async-media/types.ts'
import type { AttemptRecord } from './types.ts'

// State of asynchronous predictions: tasks, their hosted outputs, pending webhook deliveries, and
// small named secrets (webhook signing secrets of accounts, the output-URL signing key). Implemented
// by memory (tasks-memory.ts), SQLite and PostgreSQL; one contract suite runs against all three.
//
// Several gateway instances share one store: a task is driven by whichever instance holds its lease
// (`claimDue` takes it for `leaseMs`; the holder renews it by claiming again or releases it by
// `advance`). An instance that dies simply stops renewing, and another takes the task over once the
// lease runs out. Webhook deliveries are leased the same way. Times are the caller's `now` (Unix ms).

export type TaskStatus = 'processing' | 'success' | 'failed' | 'cancelled'

export interface TaskError {
  code: string
  message: string
}

/** One hosted output of a finished task (its bytes are in the outputs' FileStorage). */
export interface TaskOutputRef {
  /** The output's id (`out_…`): the key of its signed URL. */
  id: string
  type: MediaKind
}

export interface TaskRecord {
  /** 32 lowercase hex; also the task's generation id and its credit reservation's id. */
  id: string
  accountId: string
  /** The model slug asked for. */
  model: string
  family: MediaFamily
  /** The configured provider and deployment serving it, and the model id upstream. */
  provider: string
  deployment: string
  upstreamModel: string
  /** The validated input with defaults applied. */
  input: JsonValue
  webhook: string | null
  /**
   * Origin (`https://host`) that output URLs in webhook bodies use: the configured public URL, else the
   * creating request's own. Lookups use their own request's origin.
   */
  origin: string
  status: TaskStatus
  /** Null until the upstream accepted the job; then the adapter's state for `poll` and `cancel`. */
  upstreamState: JsonValue | null
  /** Cancelled by the client while an upstream job may still run: the runner cancels it upstream. */
  cancelUpstream: boolean
  outputs: TaskOutputRef[]
  error: TaskError | null
  /** Unix ms. */
  createdAt: number
  updatedAt: number
  /** A task still processing at this time fails with `timeout`. */
  deadlineAt: number
  /** When the runner should look at it next. */
  nextRunAt: number
  /** How many times the runner has looked at it (backoff grows with it). */
  runs: number
  /** The instance holding the lease, and until when; '' and 0 when nobody holds it. */
  leaseOwner: string
  leaseUntil: number
  /** `Idempotency-Key` of the creating request and the SHA-256 of its body, when it had one. */
  idempotencyKey: string | null
  requestHash: string | null
  /**
   * When a submit to the upstream started, while `upstreamState` is still null: set, the upstream may
   * have accepted the job (the instance stopped before it recorded the answer), so it is not sent again.
   */
  submitStartedAt: number | null
  /**
   * The upstream calls made for it so far, in order: every submit and every poll that failed (its
   * generation record's `attempts`). Absent until the first; absent on tasks stored before they were kept.
   */
  attempts?: AttemptRecord[]
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

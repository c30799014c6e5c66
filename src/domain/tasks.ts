import type { JsonValue, MediaFamily, MediaKind } from './media.ts'
import type { AttemptRecord } from './records.ts'

// A prediction task as it is stored and presented: its state, outputs, error and upstream attempts.

// ---- Asynchronous predictions
//
// State of asynchronous predictions: tasks, their hosted outputs, pending webhook deliveries, and
// small named secrets (webhook signing secrets of accounts, the output-URL signing key). Implemented
// by memory (memory/tasks.ts), SQLite and PostgreSQL; one contract suite runs against all three.
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

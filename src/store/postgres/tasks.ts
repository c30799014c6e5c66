import type { JsonValue, MediaFamily, MediaKind } from '../../domain/media.ts'
import type {
  TaskStores,
  ClaimShare,
  DeliveryStatus,
  OutputStore,
  SecretStore,
  StoredOutput,
  TaskStore,
  WebhookDelivery,
  WebhookStore,
} from '../types.ts'
import type { AttemptRecord } from '../../domain/records.ts'
import type { TaskError, TaskOutputRef, TaskRecord, TaskStatus } from '../../domain/tasks.ts'
import type { Query, Transaction } from './pool.ts'

// The prediction state (its interfaces: store/types.ts) in PostgreSQL, shared by every gateway instance on the
// database. Leases are taken by one statement each: `UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP
// LOCKED LIMIT n) RETURNING *`, with the lease conditions repeated in the outer WHERE. A row another
// claim holds locked is skipped, and a row it committed meanwhile is re-checked against its new
// version (a lease now held fails the condition), so two instances never hold one task. The selection
// is a MATERIALIZED CTE, run exactly once: as a plain `IN (subquery)` the planner may rescan it per
// outer row, and a rescan skips the rows this statement already changed and locks the next ones,
// leasing more than `limit`. Every other change is
// one conditional UPDATE (the lease holder, the expected status). Times are bigint ms, given by the
// caller. Tables: migration 6 of migrations.ts.

interface TaskRow {
  id: string
  account_id: string
  model: string
  family: MediaFamily
  provider: string
  deployment: string
  upstream_model: string
  input: JsonValue
  webhook: string | null
  origin: string
  status: TaskStatus
  upstream_state: JsonValue | null
  cancel_upstream: boolean
  outputs: TaskOutputRef[]
  error: TaskError | null
  created_at: string
  updated_at: string
  deadline_at: string
  next_run_at: string
  runs: number
  lease_owner: string
  lease_until: string
  idempotency_key: string | null
  request_hash: string | null
  submit_started_at: string | null
  attempts: AttemptRecord[] | null
  seq: string
}

interface OutputRow {
  id: string
  task_id: string
  account_id: string
  type: MediaKind
  content_type: string
  bytes: string
  storage_key: string
  created_at: string
  expires_at: string
}

interface DeliveryRow {
  id: string
  task_id: string
  account_id: string
  url: string
  body: string
  status: DeliveryStatus
  attempts: number
  next_attempt_at: string
  last_error: string | null
  lease_owner: string
  lease_until: string
  created_at: string
  seq: string
}

const toTask = (r: TaskRow): TaskRecord => ({
  id: r.id,
  accountId: r.account_id,
  model: r.model,
  family: r.family,
  provider: r.provider,
  deployment: r.deployment,
  upstreamModel: r.upstream_model,
  input: r.input,
  webhook: r.webhook,
  origin: r.origin,
  status: r.status,
  upstreamState: r.upstream_state,
  cancelUpstream: r.cancel_upstream,
  outputs: r.outputs,
  error: r.error,
  createdAt: Number(r.created_at),
  updatedAt: Number(r.updated_at),
  deadlineAt: Number(r.deadline_at),
  nextRunAt: Number(r.next_run_at),
  runs: r.runs,
  leaseOwner: r.lease_owner,
  leaseUntil: Number(r.lease_until),
  idempotencyKey: r.idempotency_key,
  requestHash: r.request_hash,
  submitStartedAt: r.submit_started_at === null ? null : Number(r.submit_started_at),
  ...(r.attempts === null ? {} : { attempts: r.attempts }),
})

const toOutput = (r: OutputRow): StoredOutput => ({
  id: r.id,
  taskId: r.task_id,
  accountId: r.account_id,
  type: r.type,
  contentType: r.content_type,
  bytes: Number(r.bytes),
  storageKey: r.storage_key,
  createdAt: Number(r.created_at),
  expiresAt: Number(r.expires_at),
})

const toDelivery = (r: DeliveryRow): WebhookDelivery => ({
  id: r.id,
  taskId: r.task_id,
  accountId: r.account_id,
  url: r.url,
  body: r.body,
  status: r.status,
  attempts: r.attempts,
  nextAttemptAt: Number(r.next_attempt_at),
  lastError: r.last_error,
  leaseOwner: r.lease_owner,
  leaseUntil: Number(r.lease_until),
  createdAt: Number(r.created_at),
})

/**
 * A JSON parameter as text. Always stringified here: pg would send a JS array as a PostgreSQL array.
 * Null is SQL NULL (no upstream state, no error), not the JSON value null.
 */
const json = (v: JsonValue | TaskError | TaskOutputRef[] | null): string | null =>
  v === null ? null : JSON.stringify(v)

/** RETURNING gives no order: claims are handed out oldest first, as the selection took them. */
const byDue =
  <R extends { seq: string }>(at: (r: R) => number) =>
  (a: R, b: R) =>
    at(a) - at(b) || Number(BigInt(a.seq) - BigInt(b.seq))

/**
 * A claim of up to `$4` rows of `table` matching `due` (`$2` is now) for owner `$1` until `$3`. The
 * selection is ranked per account when there is a share (`$5` the busy counts as JSON, `$6` the per-
 * account room), so accounts are served in turn; the rows picked are then locked SKIP LOCKED (a
 * window function cannot take FOR UPDATE itself) and the outer WHERE re-checks each one.
 */
function claimSql(table: string, due: string, at: string, share: ClaimShare | undefined): string {
  const pick = share
    ? `ranked AS MATERIALIZED (
         SELECT id, account_id, ${at}, seq,
           row_number() OVER (PARTITION BY account_id ORDER BY ${at}, seq) AS account_rank
         FROM ${table} WHERE ${due}),
       chosen AS MATERIALIZED (
         SELECT r.id FROM ranked r LEFT JOIN jsonb_each_text($5::jsonb) b ON b.key = r.account_id
         WHERE r.account_rank <= $6 - COALESCE(b.value::int, 0)
         ORDER BY r.account_rank, r.${at}, r.seq LIMIT $4),
       picked AS MATERIALIZED (
         SELECT id FROM ${table} WHERE id IN (SELECT id FROM chosen) FOR UPDATE SKIP LOCKED)`
    : `picked AS MATERIALIZED (
         SELECT id FROM ${table} WHERE ${due} ORDER BY ${at}, seq LIMIT $4 FOR UPDATE SKIP LOCKED)`
  return `WITH ${pick}
    UPDATE ${table} SET lease_owner = $1, lease_until = $3
    WHERE id IN (SELECT id FROM picked) AND ${due}
    RETURNING *`
}

const shareValues = (share: ClaimShare | undefined): unknown[] =>
  share ? [JSON.stringify(Object.fromEntries(share.busy)), share.perAccount] : []

/** The task's row as it is given. */
function insertTask(q: Query, task: TaskRecord) {
  return q<TaskRow>(
    `INSERT INTO tasks (id, account_id, model, family, provider, deployment, upstream_model, input,
             webhook, status, upstream_state, cancel_upstream, outputs, error, created_at, updated_at,
             deadline_at, next_run_at, runs, lease_owner, lease_until, idempotency_key, request_hash, origin,
             submit_started_at, attempts)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
             $20, $21, $22, $23, $24, $25, $26)
           RETURNING *`,
    [
      task.id,
      task.accountId,
      task.model,
      task.family,
      task.provider,
      task.deployment,
      task.upstreamModel,
      JSON.stringify(task.input),
      task.webhook,
      task.status,
      json(task.upstreamState),
      task.cancelUpstream,
      JSON.stringify(task.outputs),
      json(task.error),
      task.createdAt,
      task.updatedAt,
      task.deadlineAt,
      task.nextRunAt,
      task.runs,
      task.leaseOwner,
      task.leaseUntil,
      task.idempotencyKey,
      task.requestHash,
      task.origin,
      task.submitStartedAt,
      task.attempts === undefined ? null : JSON.stringify(task.attempts),
    ],
  )
}

/** A new task; with an idempotency key, the task that key already names if it is recent. */
function createTask(query: Query, transaction: Transaction): TaskStore['create'] {
  return async (task, idempotencySince) => {
    if (task.idempotencyKey === null) {
      const { rows } = await insertTask(query, task)
      return { task: toTask(rows[0]!), created: true }
    }
    return transaction(async (q) => {
      // Takes the key, or moves it off a task older than the window. A racing create of the same
      // key waits on this row until commit, then finds it recent and takes nothing.
      const took = await q<{ task_id: string }>(
        `INSERT INTO task_keys AS k (account_id, idempotency_key, task_id, created_at) VALUES ($1, $2, $3, $4)
           ON CONFLICT (account_id, idempotency_key) DO UPDATE SET task_id = excluded.task_id,
             created_at = excluded.created_at WHERE k.created_at < $5
           RETURNING task_id`,
        [task.accountId, task.idempotencyKey, task.id, task.createdAt, idempotencySince],
      )
      if (took.rows.length === 0) {
        const { rows } = await q<TaskRow>(
          `SELECT t.* FROM task_keys k JOIN tasks t ON t.id = k.task_id
             WHERE k.account_id = $1 AND k.idempotency_key = $2`,
          [task.accountId, task.idempotencyKey],
        )
        if (!rows[0]) throw new Error(`idempotency key of a missing task (account ${task.accountId})`)
        return { task: toTask(rows[0]), created: false }
      }
      const { rows } = await insertTask(q, task)
      return { task: toTask(rows[0]!), created: true }
    })
  }
}

function createTasks(query: Query, transaction: Transaction): TaskStore {
  return {
    create: createTask(query, transaction),
    async get(id) {
      const { rows } = await query<TaskRow>('SELECT * FROM tasks WHERE id = $1', [id])
      return rows[0] ? toTask(rows[0]) : null
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const due = `(status = 'processing' OR cancel_upstream) AND next_run_at <= $2
        AND (lease_owner = '' OR lease_until <= $2)`
      const { rows } = await query<TaskRow>(claimSql('tasks', due, 'next_run_at', share), [
        owner,
        now,
        now + leaseMs,
        limit,
        ...shareValues(share),
      ])
      return rows.sort(byDue((r) => Number(r.next_run_at))).map(toTask)
    },
    async findByIdempotencyKey(accountId, idempotencyKey, since) {
      const { rows } = await query<TaskRow>(
        `SELECT t.* FROM task_keys k JOIN tasks t ON t.id = k.task_id
         WHERE k.account_id = $1 AND k.idempotency_key = $2 AND k.created_at >= $3`,
        [accountId, idempotencyKey, since],
      )
      return rows[0] ? toTask(rows[0]) : null
    },
    async advance(id, owner, expectStatus, patch) {
      const values: unknown[] = [id, owner, expectStatus]
      const sets: string[] = ["lease_owner = ''", 'lease_until = 0']
      const set = (column: string, value: unknown): void => {
        values.push(value)
        sets.push(`${column} = $${values.length}`)
      }
      if (patch.provider !== undefined) set('provider', patch.provider)
      if (patch.deployment !== undefined) set('deployment', patch.deployment)
      if (patch.upstreamModel !== undefined) set('upstream_model', patch.upstreamModel)
      if (patch.status !== undefined) set('status', patch.status)
      if (patch.upstreamState !== undefined) set('upstream_state', json(patch.upstreamState))
      if (patch.cancelUpstream !== undefined) set('cancel_upstream', patch.cancelUpstream)
      if (patch.outputs !== undefined) set('outputs', json(patch.outputs))
      if (patch.error !== undefined) set('error', json(patch.error))
      if (patch.nextRunAt !== undefined) set('next_run_at', patch.nextRunAt)
      if (patch.runs !== undefined) set('runs', patch.runs)
      if (patch.updatedAt !== undefined) set('updated_at', patch.updatedAt)
      if (patch.submitStartedAt !== undefined) set('submit_started_at', patch.submitStartedAt)
      if (patch.attempts !== undefined) set('attempts', JSON.stringify(patch.attempts))
      const { rows } = await query<TaskRow>(
        `UPDATE tasks SET ${sets.join(', ')} WHERE id = $1 AND lease_owner = $2 AND status = $3 RETURNING *`,
        values,
      )
      return rows[0] ? toTask(rows[0]) : null
    },
    async markSubmitting(id, owner, now) {
      const { rowCount } = await query(
        `UPDATE tasks SET submit_started_at = $3 WHERE id = $1 AND lease_owner = $2 AND status = 'processing'
           AND upstream_state IS NULL`,
        [id, owner, now],
      )
      return (rowCount ?? 0) > 0
    },
    async cancel(accountId, id, now) {
      const { rows } = await query<TaskRow>(
        `UPDATE tasks SET status = 'cancelled', cancel_upstream = upstream_state IS NOT NULL,
           updated_at = $3, next_run_at = $3
         WHERE id = $1 AND account_id = $2 AND status = 'processing'
         RETURNING *`,
        [id, accountId, now],
      )
      if (rows[0]) return toTask(rows[0])
      // Not processing (or not the account's): the task as it is now, if the account has it.
      const current = await query<TaskRow>('SELECT * FROM tasks WHERE id = $1 AND account_id = $2', [
        id,
        accountId,
      ])
      return current.rows[0] ? toTask(current.rows[0]) : null
    },
    async listByAccount(accountId, { limit, before }) {
      const { rows } =
        before === undefined
          ? await query<TaskRow>('SELECT * FROM tasks WHERE account_id = $1 ORDER BY seq DESC LIMIT $2', [
              accountId,
              limit + 1,
            ])
          : await query<TaskRow>(
              `SELECT * FROM tasks WHERE account_id = $1
                 AND seq < (SELECT seq FROM tasks WHERE account_id = $1 AND id = $3)
               ORDER BY seq DESC LIMIT $2`,
              [accountId, limit + 1, before],
            )
      const data = rows.slice(0, limit).map(toTask)
      return { data, nextCursor: rows.length > limit && data.length > 0 ? data.at(-1)!.id : null }
    },
    async sweep(before) {
      // One statement: the tasks, their idempotency keys and their settled deliveries go together.
      // Deliveries still pending stay: the finish they report is sent even though the task went.
      const { rows } = await query<{ outputs: TaskOutputRef[] }>(
        `WITH gone AS (
           DELETE FROM tasks WHERE status <> 'processing' AND NOT cancel_upstream AND updated_at < $1
           RETURNING id, outputs),
         keys AS (DELETE FROM task_keys k USING gone WHERE k.task_id = gone.id),
         sent AS (DELETE FROM webhook_deliveries d USING gone WHERE d.task_id = gone.id AND d.status <> 'pending')
         SELECT outputs FROM gone`,
        [before],
      )
      return rows.flatMap((r) => r.outputs.map((o) => o.id))
    },
  }
}

function createOutputs(query: Query): OutputStore {
  return {
    async put(o) {
      await query(
        `INSERT INTO task_outputs (id, task_id, account_id, type, content_type, bytes, storage_key,
           created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (id) DO UPDATE SET task_id = excluded.task_id, account_id = excluded.account_id,
           type = excluded.type, content_type = excluded.content_type, bytes = excluded.bytes,
           storage_key = excluded.storage_key, created_at = excluded.created_at, expires_at = excluded.expires_at`,
        [o.id, o.taskId, o.accountId, o.type, o.contentType, o.bytes, o.storageKey, o.createdAt, o.expiresAt],
      )
    },
    async get(id) {
      const { rows } = await query<OutputRow>('SELECT * FROM task_outputs WHERE id = $1', [id])
      return rows[0] ? toOutput(rows[0]) : null
    },
    async takeExpired(now, limit) {
      // Two instances sweeping at once take different records (each deletes what it locked).
      const { rows } = await query<OutputRow & { seq: string }>(
        `WITH picked AS MATERIALIZED (
           SELECT id FROM task_outputs WHERE expires_at <= $1 ORDER BY expires_at, seq LIMIT $2
           FOR UPDATE SKIP LOCKED)
         DELETE FROM task_outputs WHERE id IN (SELECT id FROM picked)
         RETURNING *`,
        [now, limit],
      )
      return rows.sort(byDue((r) => Number(r.expires_at))).map(toOutput)
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const { rows } = await query<{ storage_key: string }>(
        'SELECT DISTINCT storage_key FROM task_outputs WHERE storage_key = ANY($1::text[])',
        [storageKeys],
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }
}

function createWebhooks(query: Query): WebhookStore {
  return {
    async enqueue(d) {
      await query(
        `INSERT INTO webhook_deliveries (id, task_id, account_id, url, body, status, attempts,
           next_attempt_at, last_error, lease_owner, lease_until, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) ON CONFLICT (id) DO NOTHING`,
        [
          d.id,
          d.taskId,
          d.accountId,
          d.url,
          d.body,
          d.status,
          d.attempts,
          d.nextAttemptAt,
          d.lastError,
          d.leaseOwner,
          d.leaseUntil,
          d.createdAt,
        ],
      )
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const due = `status = 'pending' AND next_attempt_at <= $2 AND (lease_owner = '' OR lease_until <= $2)`
      const { rows } = await query<DeliveryRow>(
        claimSql('webhook_deliveries', due, 'next_attempt_at', share),
        [owner, now, now + leaseMs, limit, ...shareValues(share)],
      )
      return rows.sort(byDue((r) => Number(r.next_attempt_at))).map(toDelivery)
    },
    async record(id, owner, result) {
      const { rowCount } = await query(
        `UPDATE webhook_deliveries SET status = $3, attempts = $4, next_attempt_at = $5, last_error = $6,
           lease_owner = '', lease_until = 0
         WHERE id = $1 AND lease_owner = $2`,
        [id, owner, result.status, result.attempts, result.nextAttemptAt, result.lastError],
      )
      return (rowCount ?? 0) > 0
    },
    async get(id) {
      const { rows } = await query<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE id = $1', [id])
      return rows[0] ? toDelivery(rows[0]) : null
    },
    async listByTask(taskId) {
      const { rows } = await query<DeliveryRow>(
        'SELECT * FROM webhook_deliveries WHERE task_id = $1 ORDER BY created_at, seq',
        [taskId],
      )
      return rows.map(toDelivery)
    },
    async listByAccount(accountId, limit) {
      const { rows } = await query<DeliveryRow>(
        'SELECT * FROM webhook_deliveries WHERE account_id = $1 ORDER BY seq DESC LIMIT $2',
        [accountId, limit],
      )
      return rows.map(toDelivery)
    },
  }
}

function createSecrets(query: Query): SecretStore {
  const secretOf = async (name: string): Promise<string | null> => {
    const { rows } = await query<{ value: string }>('SELECT value FROM secrets WHERE name = $1', [name])
    return rows[0]?.value ?? null
  }
  return {
    async getOrCreate(name, create) {
      const found = await secretOf(name)
      if (found !== null) return found
      // Two instances starting at once: one insert wins, the other does nothing and reads the winner's.
      // (Two statements: one would read from a snapshot taken before the winner committed.)
      await query('INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING', [
        name,
        create(),
      ])
      const stored = await secretOf(name)
      if (stored === null) throw new Error(`secret ${name} vanished while being created`)
      return stored
    },
    get: secretOf,
    async set(name, value) {
      await query(
        'INSERT INTO secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
        [name, value],
      )
    },
  }
}

export function createPostgresTaskStores(query: Query, transaction: Transaction): TaskStores {
  return {
    tasks: createTasks(query, transaction),
    outputs: createOutputs(query),
    webhooks: createWebhooks(query),
    secrets: createSecrets(query),
  }
}

import type { SQLInputValue } from 'node:sqlite'
import type { SqliteHelpers } from './commit.ts'
import type { JsonValue, MediaFamily, MediaKind } from '../../domain/media.ts'
import type {
  TaskStores,
  ClaimShare,
  DeliveryStatus,
  OutputStore,
  SecretStore,
  StoredOutput,
  TaskPatch,
  TaskStore,
  WebhookDelivery,
  WebhookStore,
} from '../types.ts'
import type { AttemptRecord } from '../../domain/records.ts'
import type { TaskError, TaskOutputRef, TaskRecord, TaskStatus } from '../../domain/tasks.ts'

// The prediction state (the interfaces: types.ts) in the SQLite file, with commit.ts's helpers: `tx` runs a
// read-modify-write in the next group commit (BEGIN IMMEDIATE, so it holds the file's write lock from
// its first read: a claim's select and its lease update cannot interleave with another process's),
// `read` a single statement. Tables: migration 3 of migrations.ts.

interface TaskRow {
  id: string
  account_id: string
  model: string
  family: MediaFamily
  provider: string
  deployment: string
  upstream_model: string
  input: string
  webhook: string | null
  origin: string
  status: TaskStatus
  upstream_state: string | null
  cancel_upstream: number
  outputs: string
  error: string | null
  created_at: number
  updated_at: number
  deadline_at: number
  next_run_at: number
  runs: number
  lease_owner: string
  lease_until: number
  idempotency_key: string | null
  request_hash: string | null
  submit_started_at: number | null
  attempts: string | null
}

interface OutputRow {
  id: string
  task_id: string
  account_id: string
  type: MediaKind
  content_type: string
  bytes: number
  storage_key: string
  created_at: number
  expires_at: number
}

interface DeliveryRow {
  id: string
  task_id: string
  account_id: string
  url: string
  body: string
  status: DeliveryStatus
  attempts: number
  next_attempt_at: number
  last_error: string | null
  lease_owner: string
  lease_until: number
  created_at: number
}

const toTask = (r: TaskRow): TaskRecord => ({
  id: r.id,
  accountId: r.account_id,
  model: r.model,
  family: r.family,
  provider: r.provider,
  deployment: r.deployment,
  upstreamModel: r.upstream_model,
  input: JSON.parse(r.input) as JsonValue,
  webhook: r.webhook,
  origin: r.origin,
  status: r.status,
  upstreamState: r.upstream_state === null ? null : (JSON.parse(r.upstream_state) as JsonValue),
  cancelUpstream: r.cancel_upstream === 1,
  outputs: JSON.parse(r.outputs) as TaskOutputRef[],
  error: r.error === null ? null : (JSON.parse(r.error) as TaskError),
  createdAt: r.created_at,
  updatedAt: r.updated_at,
  deadlineAt: r.deadline_at,
  nextRunAt: r.next_run_at,
  runs: r.runs,
  leaseOwner: r.lease_owner,
  leaseUntil: r.lease_until,
  idempotencyKey: r.idempotency_key,
  requestHash: r.request_hash,
  submitStartedAt: r.submit_started_at ?? null,
  ...(r.attempts === null ? {} : { attempts: JSON.parse(r.attempts) as AttemptRecord[] }),
})

const toOutput = (r: OutputRow): StoredOutput => ({
  id: r.id,
  taskId: r.task_id,
  accountId: r.account_id,
  type: r.type,
  contentType: r.content_type,
  bytes: r.bytes,
  storageKey: r.storage_key,
  createdAt: r.created_at,
  expiresAt: r.expires_at,
})

const toDelivery = (r: DeliveryRow): WebhookDelivery => ({
  id: r.id,
  taskId: r.task_id,
  accountId: r.account_id,
  url: r.url,
  body: r.body,
  status: r.status,
  attempts: r.attempts,
  nextAttemptAt: r.next_attempt_at,
  lastError: r.last_error,
  leaseOwner: r.lease_owner,
  leaseUntil: r.lease_until,
  createdAt: r.created_at,
})

/** JSON or SQL NULL: a null upstream state or error is "none", not the JSON value null. */
const jsonOrNull = (v: JsonValue | TaskError | null): string | null => (v === null ? null : JSON.stringify(v))

/** Tasks the runner should look at: the condition of claimDue, shared by its select. */
const DUE_TASK = `(status = 'processing' OR cancel_upstream = 1) AND next_run_at <= ?
  AND (lease_owner = '' OR lease_until <= ?)`

/**
 * The ids of up to `limit` rows of `table` matching `due` (its `?` bound to `now` twice), oldest by
 * `at` first; with a share, ranked per account (ROW_NUMBER) so accounts are served in turn, each up
 * to its room (`busy` joined in as a JSON object).
 */
function dueQuery(
  table: string,
  due: string,
  at: string,
  share: ClaimShare | undefined,
): { sql: string; extra: (limit: number) => SQLInputValue[] } {
  if (!share) {
    return {
      sql: `SELECT * FROM ${table} WHERE ${due} ORDER BY ${at}, seq LIMIT ?`,
      extra: (limit) => [limit],
    }
  }
  return {
    sql: `SELECT * FROM (
        SELECT r.* FROM (
          SELECT *, ROW_NUMBER() OVER (PARTITION BY account_id ORDER BY ${at}, seq) AS account_rank
          FROM ${table} WHERE ${due}) r
        LEFT JOIN json_each(?) b ON b.key = r.account_id
        WHERE r.account_rank <= ? - COALESCE(b.value, 0)
        ORDER BY r.account_rank, r.${at}, r.seq LIMIT ?)
      ORDER BY ${at}, seq`,
    extra: (limit) => [JSON.stringify(Object.fromEntries(share.busy)), share.perAccount, limit],
  }
}

export function createSqliteTaskStores(h: SqliteHelpers): TaskStores {
  return {
    tasks: createSqliteTaskStore(h),
    outputs: createSqliteOutputStore(h),
    webhooks: createSqliteWebhookStore(h),
    secrets: createSqliteSecretStore(h),
  }
}

const taskById = ({ get }: SqliteHelpers, id: string): TaskRecord | null => {
  const r = get<TaskRow>('SELECT * FROM tasks WHERE id = ?', id)
  return r ? toTask(r) : null
}

/** Writes back what `advance` and `cancel` may change. */
function writeTask({ run }: SqliteHelpers, t: TaskRecord): void {
  run(
    `UPDATE tasks SET provider = ?, deployment = ?, upstream_model = ?, status = ?, upstream_state = ?,
       cancel_upstream = ?, outputs = ?, error = ?, updated_at = ?, next_run_at = ?, runs = ?,
       lease_owner = ?, lease_until = ?, submit_started_at = ?, attempts = ?
     WHERE id = ?`,
    t.provider,
    t.deployment,
    t.upstreamModel,
    t.status,
    jsonOrNull(t.upstreamState),
    t.cancelUpstream ? 1 : 0,
    JSON.stringify(t.outputs),
    jsonOrNull(t.error),
    t.updatedAt,
    t.nextRunAt,
    t.runs,
    t.leaseOwner,
    t.leaseUntil,
    t.submitStartedAt,
    t.attempts === undefined ? null : JSON.stringify(t.attempts),
    t.id,
  )
}

/** TaskStore.create, inside a transaction. */
function createTask(
  h: SqliteHelpers,
  task: TaskRecord,
  idempotencySince: number,
): { task: TaskRecord; created: boolean } {
  const { get, run } = h
  // Checked, not left to the UNIQUE constraint, so the error says what happened (as memory's does);
  // either way it fails only its own operation (sql-errors.ts: a constraint is a bug, not a 503).
  if (get('SELECT 1 FROM tasks WHERE id = ?', task.id)) throw new Error(`task ${task.id} exists`)
  if (task.idempotencyKey !== null) {
    const held = get<{ task_id: string; created_at: number }>(
      'SELECT task_id, created_at FROM task_keys WHERE account_id = ? AND idempotency_key = ?',
      task.accountId,
      task.idempotencyKey,
    )
    const existing = held && held.created_at >= idempotencySince ? taskById(h, held.task_id) : null
    if (existing) return { task: existing, created: false }
    // No key, or its task is older than the window: the key now names the new task.
    run(
      `INSERT INTO task_keys (account_id, idempotency_key, task_id, created_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (account_id, idempotency_key) DO UPDATE SET task_id = excluded.task_id,
         created_at = excluded.created_at`,
      task.accountId,
      task.idempotencyKey,
      task.id,
      task.createdAt,
    )
  }
  run(
    `INSERT INTO tasks (id, account_id, model, family, provider, deployment, upstream_model, input,
       webhook, status, upstream_state, cancel_upstream, outputs, error, created_at, updated_at,
       deadline_at, next_run_at, runs, lease_owner, lease_until, idempotency_key, request_hash, origin,
       submit_started_at, attempts)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
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
    jsonOrNull(task.upstreamState),
    task.cancelUpstream ? 1 : 0,
    JSON.stringify(task.outputs),
    jsonOrNull(task.error),
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
  )
  return { task: taskById(h, task.id)!, created: true }
}

function createSqliteTaskStore(h: SqliteHelpers): TaskStore {
  const { get, all, run, tx, read } = h
  return {
    async create(task, idempotencySince) {
      return tx(() => createTask(h, task, idempotencySince))
    },
    async get(id) {
      return read(() => taskById(h, id))
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const q = dueQuery('tasks', DUE_TASK, 'next_run_at', share)
      return tx(() => {
        const due = all<TaskRow>(q.sql, now, now, ...q.extra(limit)).map(toTask)
        for (const t of due) {
          t.leaseOwner = owner
          t.leaseUntil = now + leaseMs
          run('UPDATE tasks SET lease_owner = ?, lease_until = ? WHERE id = ?', owner, t.leaseUntil, t.id)
        }
        return due
      })
    },
    async findByIdempotencyKey(accountId, idempotencyKey, since) {
      return read(() => {
        const r = get<TaskRow>(
          `SELECT t.* FROM task_keys k JOIN tasks t ON t.id = k.task_id
         WHERE k.account_id = ? AND k.idempotency_key = ? AND k.created_at >= ?`,
          accountId,
          idempotencyKey,
          since,
        )
        return r ? toTask(r) : null
      })
    },
    async advance(id, owner, expectStatus, patch) {
      return tx(() => {
        const t = taskById(h, id)
        if (!t || t.leaseOwner !== owner || t.status !== expectStatus) return null
        const next: TaskRecord = {
          ...t,
          ...(structuredClone(patch) as TaskPatch),
          leaseOwner: '',
          leaseUntil: 0,
        }
        writeTask(h, next)
        return next
      })
    },
    async markSubmitting(id, owner, now) {
      return tx(
        () =>
          run(
            `UPDATE tasks SET submit_started_at = ? WHERE id = ? AND lease_owner = ? AND status = 'processing'
             AND upstream_state IS NULL`,
            now,
            id,
            owner,
          ) > 0,
      )
    },
    async cancel(accountId, id, now) {
      return tx(() => {
        const t = taskById(h, id)
        if (!t || t.accountId !== accountId) return null
        if (t.status !== 'processing') return t
        const next: TaskRecord = {
          ...t,
          status: 'cancelled',
          cancelUpstream: t.upstreamState !== null,
          updatedAt: now,
          nextRunAt: now,
        }
        writeTask(h, next)
        return next
      })
    },
    async listByAccount(accountId, { limit, before }) {
      const rows = read(() => {
        if (before === undefined) {
          return all<TaskRow>(
            'SELECT * FROM tasks WHERE account_id = ? ORDER BY seq DESC LIMIT ?',
            accountId,
            limit + 1,
          )
        }
        const at = get<{ seq: number }>(
          'SELECT seq FROM tasks WHERE account_id = ? AND id = ?',
          accountId,
          before,
        )
        if (!at) return []
        return all<TaskRow>(
          'SELECT * FROM tasks WHERE account_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?',
          accountId,
          at.seq,
          limit + 1,
        )
      })
      const data = rows.slice(0, limit).map(toTask)
      return { data, nextCursor: rows.length > limit && data.length > 0 ? data.at(-1)!.id : null }
    },
    async sweep(before) {
      return tx(() => {
        const gone = all<{ id: string; outputs: string }>(
          `DELETE FROM tasks WHERE status <> 'processing' AND cancel_upstream = 0 AND updated_at < ?
         RETURNING id, outputs`,
          before,
        )
        if (gone.length === 0) return []
        const ids = JSON.stringify(gone.map((g) => g.id))
        run('DELETE FROM task_keys WHERE task_id IN (SELECT value FROM json_each(?))', ids)
        // Deliveries still pending are kept: the finish they report is sent even though the task went.
        run(
          `DELETE FROM webhook_deliveries WHERE status <> 'pending'
           AND task_id IN (SELECT value FROM json_each(?))`,
          ids,
        )
        return gone.flatMap((g) => (JSON.parse(g.outputs) as TaskOutputRef[]).map((o) => o.id))
      })
    },
  }
}

function createSqliteOutputStore({ all, get, run, tx, read }: SqliteHelpers): OutputStore {
  return {
    async put(o) {
      await tx(() =>
        run(
          `INSERT INTO task_outputs (id, task_id, account_id, type, content_type, bytes, storage_key,
           created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET task_id = excluded.task_id, account_id = excluded.account_id,
           type = excluded.type, content_type = excluded.content_type, bytes = excluded.bytes,
           storage_key = excluded.storage_key, created_at = excluded.created_at,
           expires_at = excluded.expires_at`,
          o.id,
          o.taskId,
          o.accountId,
          o.type,
          o.contentType,
          o.bytes,
          o.storageKey,
          o.createdAt,
          o.expiresAt,
        ),
      )
    },
    async get(id) {
      const r = read(() => get<OutputRow>('SELECT * FROM task_outputs WHERE id = ?', id))
      return r ? toOutput(r) : null
    },
    async takeExpired(now, limit) {
      return tx(() => {
        const rows = all<OutputRow>(
          'SELECT * FROM task_outputs WHERE expires_at <= ? ORDER BY expires_at, seq LIMIT ?',
          now,
          limit,
        )
        for (const r of rows) run('DELETE FROM task_outputs WHERE id = ?', r.id)
        return rows.map(toOutput)
      })
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const rows = read(() =>
        all<{ storage_key: string }>(
          'SELECT DISTINCT storage_key FROM task_outputs WHERE storage_key IN (SELECT value FROM json_each(?))',
          JSON.stringify(storageKeys),
        ),
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }
}

function createSqliteWebhookStore({ all, get, run, tx, read }: SqliteHelpers): WebhookStore {
  return {
    async enqueue(d) {
      await tx(() =>
        run(
          `INSERT INTO webhook_deliveries (id, task_id, account_id, url, body, status, attempts,
           next_attempt_at, last_error, lease_owner, lease_until, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
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
        ),
      )
    },
    async claimDue(owner, now, leaseMs, limit, share) {
      const q = dueQuery(
        'webhook_deliveries',
        `status = 'pending' AND next_attempt_at <= ? AND (lease_owner = '' OR lease_until <= ?)`,
        'next_attempt_at',
        share,
      )
      return tx(() => {
        const due = all<DeliveryRow>(q.sql, now, now, ...q.extra(limit)).map(toDelivery)
        for (const d of due) {
          d.leaseOwner = owner
          d.leaseUntil = now + leaseMs
          run(
            'UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?',
            owner,
            d.leaseUntil,
            d.id,
          )
        }
        return due
      })
    },
    async record(id, owner, result) {
      return tx(
        () =>
          run(
            `UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?, last_error = ?,
             lease_owner = '', lease_until = 0 WHERE id = ? AND lease_owner = ?`,
            result.status,
            result.attempts,
            result.nextAttemptAt,
            result.lastError,
            id,
            owner,
          ) > 0,
      )
    },
    async get(id) {
      const r = read(() => get<DeliveryRow>('SELECT * FROM webhook_deliveries WHERE id = ?', id))
      return r ? toDelivery(r) : null
    },
    async listByTask(taskId) {
      return read(() =>
        all<DeliveryRow>(
          'SELECT * FROM webhook_deliveries WHERE task_id = ? ORDER BY created_at, seq',
          taskId,
        ),
      ).map(toDelivery)
    },
    async listByAccount(accountId, limit) {
      return read(() =>
        all<DeliveryRow>(
          'SELECT * FROM webhook_deliveries WHERE account_id = ? ORDER BY seq DESC LIMIT ?',
          accountId,
          limit,
        ),
      ).map(toDelivery)
    },
  }
}

function createSqliteSecretStore({ get, run, tx, read }: SqliteHelpers): SecretStore {
  return {
    async getOrCreate(name, create) {
      const found = read(() => get<{ value: string }>('SELECT value FROM secrets WHERE name = ?', name))
      if (found) return found.value
      const value = create()
      // Another process may have stored one since the read: its value wins, and this one is dropped.
      return tx(() => {
        run('INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING', name, value)
        return get<{ value: string }>('SELECT value FROM secrets WHERE name = ?', name)!.value
      })
    },
    async get(name) {
      return (
        read(() => get<{ value: string }>('SELECT value FROM secrets WHERE name = ?', name))?.value ?? null
      )
    },
    async set(name, value) {
      await tx(() =>
        run(
          'INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value',
          name,
          value,
        ),
      )
    },
  }
}

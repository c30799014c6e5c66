import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite'
import { GatewayError } from '../../errors.ts'
import { isUnavailable, sqliteCondition, toStoreError } from '../sql-errors.ts'

// The connection's statements and its group commit: what every part of the SQLite store (accounts.ts,
// ledger.ts, tasks.ts, …) runs its SQL through.
//
// Group commit: the write operations of one turn of the event loop (concurrent requests) run in one
// transaction, and one failing undoes only itself (the batch then runs again, each write in a savepoint
// of its own: commitBatch). The transaction's fixed costs (the lock, the WAL write of the pages every
// request touches: the account's row, its rate windows) are paid once per batch, not once per
// operation. Each caller's promise settles after the COMMIT: nothing is acknowledged before it is
// durable.
//
// Each write carries the deadline its caller stops waiting at (setDeadline): one past it is not
// begun, and a transaction holding one is rolled back rather than committed late, so a caller told
// `store_unavailable` was not charged behind its back (only a COMMIT itself stalling can still land).

/** The statement helpers each part of the store is given. */
export interface SqliteHelpers {
  get<T>(text: string, ...params: SQLInputValue[]): T | undefined
  all<T>(text: string, ...params: SQLInputValue[]): T[]
  run(text: string, ...params: SQLInputValue[]): number
  /**
   * Runs `fn` atomically in the next group commit (BEGIN IMMEDIATE, so it holds the file's write lock
   * from its first read); database failures become `store_unavailable`. `savepoint` false: a read,
   * nothing of it to undo.
   */
  tx<T>(fn: () => T, savepoint?: boolean): Promise<T>
  /**
   * A read of several statements, one snapshot: it joins the next group commit (no savepoint, no
   * transaction of its own: one lock per batch rather than a BEGIN … COMMIT per read). Its caller
   * waits for that commit, which in the database thread it does anyway (a batch is answered whole).
   */
  txRead<T>(fn: () => T): Promise<T>
  /** A single read statement (a snapshot by itself); database failures become `store_unavailable`. */
  read<T>(fn: () => T): T
}

export interface SqliteConnection extends SqliteHelpers {
  /** Calls made from now on are not begun or committed after `at` (Date.now() time). */
  setDeadline(at: number): void
  /** Commits what is queued, then closes the database. */
  close(): void
}

/**
 * True when the database itself failed (sql-errors.ts's rule): the whole group commit is then rolled
 * back. A constraint or statement error, like a caller's mistake thrown on purpose, fails only its own
 * operation (rolled back to its savepoint), and is not the database being unavailable.
 */
function databaseFailed(err: unknown): boolean {
  const condition = sqliteCondition(err)
  return condition !== undefined && isUnavailable(condition)
}

/** A failure as the caller gets it: 503 `store_unavailable` when the database failed, else as it is. */
function unavailable(err: unknown): unknown {
  const condition = sqliteCondition(err)
  return condition === undefined ? err : toStoreError(err, condition)
}

const timedOut = (): GatewayError =>
  new GatewayError('store_unavailable', 'the state store did not answer in time')

interface QueuedWrite {
  fn: () => unknown
  resolve: (value: unknown) => void
  reject: (err: unknown) => void
  deadline: number
  /** False for a read: nothing of it to undo, so no savepoint around it. */
  savepoint: boolean
}

/** The helpers and group commit over `db`, its statements prepared once per text. */
export function connect(db: DatabaseSync): SqliteConnection {
  const cache = new Map<string, StatementSync>()
  /** A prepared statement, prepared once per text. */
  const sql = (text: string): StatementSync => {
    let s = cache.get(text)
    if (!s) {
      s = db.prepare(text)
      cache.set(text, s)
    }
    return s
  }
  let queue: QueuedWrite[] = []
  let scheduled = false
  let deadline = Number.POSITIVE_INFINITY
  const flush = (): void => {
    scheduled = false
    const now = Date.now()
    const batch = queue.filter((w) => w.deadline >= now)
    for (const w of queue) if (w.deadline < now) w.reject(timedOut())
    queue = []
    if (batch.length > 0) commitBatch(db, sql, batch)
  }
  const tx = <T>(fn: () => T, savepoint = true): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      queue.push({ fn, resolve: resolve as (value: unknown) => void, reject, deadline, savepoint })
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    })
  return {
    get: <T>(text: string, ...params: SQLInputValue[]): T | undefined =>
      sql(text).get(...params) as T | undefined,
    all: <T>(text: string, ...params: SQLInputValue[]): T[] => sql(text).all(...params) as T[],
    run: (text: string, ...params: SQLInputValue[]): number => Number(sql(text).run(...params).changes),
    tx,
    txRead: (fn) => tx(fn, false),
    read(fn) {
      try {
        return fn()
      } catch (err) {
        throw unavailable(err)
      }
    },
    setDeadline(at) {
      deadline = at
    },
    close() {
      if (!db.isOpen) return
      flush()
      cache.clear()
      db.close()
    },
  }
}

/**
 * Runs `batch` in one transaction and answers each caller. Most batches fail nowhere, so their writes
 * run without a savepoint each (a savepoint and its release were four statements of a request's
 * dozen, a fifth to a quarter of the database thread's work). A write that fails then has left its
 * partial writes in the transaction: the whole batch is rolled back and run again with a savepoint
 * around each write, so that only that write is undone. Running the writes again is safe: what they
 * change is in the database, which the rollback restored, and their answers are the second run's.
 */
function commitBatch(db: DatabaseSync, sql: (text: string) => StatementSync, batch: QueuedWrite[]): void {
  const due = Math.min(...batch.map((w) => w.deadline))
  let outcomes: Outcome[]
  try {
    outcomes = runBatch(sql, batch, due, false) ?? (runBatch(sql, batch, due, true) as Outcome[])
  } catch (err) {
    if (db.isOpen && db.isTransaction) {
      try {
        sql('ROLLBACK').run()
      } catch {
        // The connection is gone; nothing was committed either way.
      }
    }
    for (const w of batch) w.reject(unavailable(err))
    return
  }
  batch.forEach((w, i) => {
    const o = outcomes[i]!
    if (o.ok) w.resolve(o.value)
    else w.reject(o.value)
  })
}

interface Outcome {
  ok: boolean
  value: unknown
}

/**
 * One attempt at the batch, committed. Without `savepoints`, undefined when a write failed (the
 * transaction is rolled back by then). Throws when the database itself failed or the batch is past due.
 */
function runBatch(
  sql: (text: string) => StatementSync,
  batch: QueuedWrite[],
  due: number,
  savepoints: boolean,
): Outcome[] | undefined {
  const outcomes: Outcome[] = []
  sql('BEGIN IMMEDIATE').run()
  for (const w of batch) {
    if (!w.savepoint || !savepoints) {
      try {
        outcomes.push({ ok: true, value: w.fn() })
      } catch (err) {
        if (databaseFailed(err)) throw err
        if (w.savepoint) {
          sql('ROLLBACK').run()
          return undefined
        }
        outcomes.push({ ok: false, value: err })
      }
      continue
    }
    sql('SAVEPOINT op').run()
    try {
      outcomes.push({ ok: true, value: w.fn() })
      sql('RELEASE op').run()
    } catch (err) {
      if (databaseFailed(err)) throw err
      // A caller's mistake (an unknown account) or a bug (a constraint): undo this operation only.
      sql('ROLLBACK TO op').run()
      sql('RELEASE op').run()
      outcomes.push({ ok: false, value: err })
    }
  }
  if (Date.now() > due) throw timedOut()
  sql('COMMIT').run()
  return outcomes
}

import { DAY_MS } from '../activity.ts'
import type { Store } from '../types.ts'
import { createSqliteAccountStore, createSqliteAppliedConfigStore } from './accounts.ts'
import { createSqliteAdmissionStore } from './admission.ts'
import { connect } from './commit.ts'
import { openSqliteDatabase } from './database.ts'
import { createSqliteFileStore } from './files.ts'
import { createSqliteGenerationStore } from './generations.ts'
import { createSqliteKeys } from './keys.ts'
import { createSqliteLedgerStore, type SqliteLedgerStore } from './ledger.ts'
import { createSqliteRateLimitStore } from './rate-limits.ts'
import { createSqliteResponseStore } from './responses.ts'
import { createSqliteTaskStores } from './tasks.ts'
import type { SqliteStoreOptions } from './thread.ts'

export { createSqliteStore, type SqliteStoreOptions } from './thread.ts'

// The embedded, durable backend: one SQLite file through Node's built-in node:sqlite. `openSqliteStore`
// is the database side, which runs in its own thread (worker.ts; thread.ts's `createSqliteStore` is the
// event loop's side, and what the gateway uses): a stalled disk blocks that thread, never the event
// loop. Calls are synchronous and small (prepared once, indexed), so each method runs to its end
// without yielding: within one process that alone makes it atomic. Every read-modify-write is also one
// `BEGIN IMMEDIATE … COMMIT` transaction (commit.ts), which takes the file's write lock up front, so
// several processes on one file stay correct too (they wait up to `busyTimeoutMs` for each other).
// Durability: database.ts.
//
// Money is TEXT decimal picodollars (see migrations.ts), added up in JS as bigint within the
// transaction. Failures of the database itself (disk full, locked past the timeout, closed) surface as
// GatewayError `store_unavailable` (503), never as a raw crash; a constraint or statement error is a
// bug (500). The rule is shared with PostgreSQL: sql-errors.ts.

/** What the database thread's store is told and tells beyond the Store interface (worker.ts). */
export interface SqliteEngine extends Store {
  ledger: SqliteLedgerStore
  /** Counts the clearings of the API-key cache: the event loop's copy of it is stale when it moved. */
  cacheEpoch(): number
  /** Calls made from now on are not begun or committed after `at` (Date.now() time). */
  setDeadline(at: number): void
  /** SQLite's automatic checkpoint threshold, in WAL pages. */
  setAutoCheckpoint(pages: number): void
}

/** The store on this thread's own connection: the database thread's side (worker.ts). */
export function openSqliteStore(
  path: string,
  options: Pick<SqliteStoreOptions, 'retentionDays' | 'busyTimeoutMs' | 'keyCacheCheckMs'> & {
    autoCheckpointPages?: number
  } = {},
): SqliteEngine {
  const db = openSqliteDatabase(path, options.busyTimeoutMs ?? 5000)
  if (options.autoCheckpointPages !== undefined) {
    db.exec(`PRAGMA wal_autocheckpoint = ${options.autoCheckpointPages}`)
  }
  const h = connect(db)
  const keys = createSqliteKeys(h, options.keyCacheCheckMs ?? 1_000)
  const ledger = createSqliteLedgerStore(h)
  const retentionMs = options.retentionDays === undefined ? undefined : options.retentionDays * DAY_MS
  return {
    cacheEpoch: keys.epoch,
    setDeadline: h.setDeadline,
    setAutoCheckpoint(pages) {
      if (db.isOpen) db.exec(`PRAGMA wal_autocheckpoint = ${pages}`)
    },
    accounts: createSqliteAccountStore(h, keys),
    files: createSqliteFileStore(h),
    ledger,
    generations: createSqliteGenerationStore(h),
    rateLimits: createSqliteRateLimitStore(h),
    admission: createSqliteAdmissionStore(h),
    appliedConfig: createSqliteAppliedConfigStore(h),
    ...createSqliteTaskStores(h),
    responses: createSqliteResponseStore(h),
    async ping() {
      h.read(() => h.get('SELECT 1'))
    },
    async sweep(now) {
      await h.tx(() => {
        h.run('DELETE FROM reservations WHERE expires_at <= ?', now)
        h.run('DELETE FROM file_holds WHERE expires_at <= ?', now)
        h.run('DELETE FROM rate_windows WHERE ? - start >= 2 * window_ms', now)
        // Old records go; the accounts' usage is a column, not their sum, so totals stay.
        if (retentionMs !== undefined)
          h.run('DELETE FROM generations WHERE created_at < ?', now - retentionMs)
        if (retentionMs !== undefined) h.run('DELETE FROM responses WHERE created_at < ?', now - retentionMs)
      })
    },
    async close() {
      h.close()
    },
  }
}

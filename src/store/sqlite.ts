import { copyLookup } from './copies.ts'
import { byDayThenModel, DAY_MS, joinSplitSum, splitSumSql } from './activity.ts'
import { randomUUID } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite'
import { Worker } from 'node:worker_threads'
import { capCharge, chargeCeiling } from '../billing/overage.ts'
import { GatewayError } from '../errors.ts'
import type {
  FileStore,
  StoredFile,
  Account,
  KeyHold,
  KeyLookup,
  AccountStore,
  AdmissionStore,
  ApiKeyRecord,
  AppliedConfigStore,
  Credits,
  GenerationRecord,
  GenerationStore,
  LedgerStore,
  RateCheck,
  RateDecision,
  RateLimitStore,
  Reservation,
  Store,
} from './types.ts'
import type { CheckpointerData, CheckpointReport } from './sqlite-checkpointer.ts'
import { sqliteMigrations, type Migration } from './sqlite-migrations.ts'
import { createSqliteTaskStores } from './sqlite-tasks.ts'
import { isUnavailable, sqliteCondition, toStoreError } from './sql-errors.ts'
export { createSqliteStore } from './sqlite-thread.ts'
import { createSqliteResponseStore } from './responses.ts'
import { consumeWindows, rollWindow } from './rate-windows.ts'
import {
  chargeCounters,
  noCounters,
  decodeKeySettings,
  decodeNotices,
  encodeKeySettings,
  encodeNotices,
  keyRoom,
  usageAt,
  type KeyCounters,
} from './key-usage.ts'

// The embedded, durable backend: one SQLite file through Node's built-in node:sqlite. This file is the
// database side, which runs in its own thread (sqlite-worker.ts; sqlite-thread.ts is the event loop's
// side): a stalled disk blocks that thread, never the event loop. Calls are synchronous and small
// (prepared once, indexed), so each method runs to its end without yielding: within one process that
// alone makes it atomic. Every read-modify-write is also one
// `BEGIN IMMEDIATE … COMMIT` transaction, which takes the file's write lock up front, so several
// processes on one file stay correct too (they wait up to `busyTimeoutMs` for each other).
//
// Durability: WAL journal with synchronous=NORMAL. A commit is in the WAL file (the OS's page cache)
// when it returns, so it survives the process dying at any point (`kill -9`, a crash, OOM); only an
// OS crash or power loss can lose the last transactions before the next checkpoint's fsync (FULL
// would fsync every commit and cost the hot path a disk flush per request). The database stays
// consistent either way.
//
// Money is TEXT decimal picodollars (see sqlite-migrations.ts), added up in JS as bigint within the
// transaction. Failures of the database itself (disk full, locked past the timeout, closed) surface as
// GatewayError `store_unavailable` (503), never as a raw crash; a constraint or statement error is a
// bug (500). The rule is shared with PostgreSQL: sql-errors.ts.

export interface SqliteStoreOptions {
  /** Generation records older than this many days are deleted by `sweep`; usage totals stay. */
  retentionDays?: number
  /** How long a statement waits for another process's write lock before failing (default 5000). */
  busyTimeoutMs?: number
  /**
   * How often the API-key lookup asks whether another process changed the file (default 1000 ms): a key
   * revoked or an account changed through another process takes effect here within this time.
   */
  keyCacheCheckMs?: number
  /**
   * How often a worker thread checkpoints the WAL into the database file (default 250 ms); 0 leaves it to
   * SQLite's automatic checkpoint, inside the commits on the event loop.
   */
  checkpointIntervalMs?: number
  /** Told of each checkpoint the worker thread made (tests, diagnostics). */
  onCheckpoint?: (report: CheckpointReport) => void
  /**
   * Told when the checkpoint thread failed; checkpoints then happen inside commits again until it is
   * restarted, `restartInMs` later.
   */
  onCheckpointerError?: (err: unknown, restartInMs: number) => void
  /** Told when the checkpoint thread was started again after a failure. */
  onCheckpointerRestart?: () => void
  /** The first delay before restarting a failed checkpoint thread (default 1000 ms), doubling to 60 s. */
  checkpointerRestartMs?: number
  /** The checkpoint thread's script (tests give one that fails); sqlite-checkpointer.ts by default. */
  checkpointerScript?: URL
  /**
   * How long a call waits for the database thread (default 5000 ms) before failing with 503
   * `store_unavailable`. A call not yet begun by then is never run; a commit is not begun after it.
   */
  timeoutMs?: number
  /** Batches of calls sent to the database thread before the first is answered (default 2). */
  maxBatchesInFlight?: number
  /** Told of each message sent to the database thread, with the number of calls it carries. */
  onBatch?: (calls: number) => void
  /** Told when the database thread died (it is started again `restartInMs` later). */
  onThreadError?: (err: unknown, restartInMs: number) => void
  /** Told each time a database thread is started (the first, and each restart). */
  onThreadStart?: () => void
  /**
   * Tests: while `stallGate[0]` is 1 the database thread blocks before each batch, as on a stalled disk
   * (set it back to 0 and `Atomics.notify` it to resume); at 2 the thread exits instead (a crash).
   */
  stallGate?: Int32Array
}

/** What the database thread's store is told and tells beyond the Store interface (sqlite-worker.ts). */
export interface SqliteEngine extends Store {
  /** Counts the clearings of the API-key cache: the event loop's copy of it is stale when it moved. */
  cacheEpoch(): number
  /** Calls made from now on are not begun or committed after `at` (Date.now() time). */
  setDeadline(at: number): void
  /** SQLite's automatic checkpoint threshold, in WAL pages. */
  setAutoCheckpoint(pages: number): void
}

/**
 * What the database thread answers for a `ledger.settle` that charged the record it was given,
 * unchanged: the event loop's side returns its own copy rather than receiving the record back.
 */
export const SETTLED_AS_GIVEN = 'settled-as-given'

interface AccountRow {
  id: string
  name: string
  created_at: number
  discount_ppm: number
  model_discounts_ppm: string
  rate_limits: string
  overdraft: string
  notices: string
}
interface KeyRow {
  hash: string
  id: string
  account_id: string
  prefix: string
  created_at: number
  settings: string
}
interface CountersRow {
  total: string
  day_start: number
  day: string
  week_start: number
  week: string
  month_start: number
  month: string
}
const toCounters = (r: CountersRow | undefined): KeyCounters | undefined =>
  r && {
    total: BigInt(r.total),
    dayStart: r.day_start,
    day: BigInt(r.day),
    weekStart: r.week_start,
    week: BigInt(r.week),
    monthStart: r.month_start,
    month: BigInt(r.month),
  }
interface FileRow {
  seq: number
  id: string
  account_id: string
  bytes: number
  created_at: number
  filename: string
  purpose: StoredFile['purpose']
  content_type: string
  storage_key: string
}
interface WindowRow {
  start: number
  current: number
  previous: number
  window_ms: number
}

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  createdAt: r.created_at,
  discountPpm: r.discount_ppm,
  modelDiscountsPpm: JSON.parse(r.model_discounts_ppm) as Record<string, number>,
  rateLimits: JSON.parse(r.rate_limits) as Account['rateLimits'],
  ...(r.overdraft !== '0' ? { overdraft: BigInt(r.overdraft) } : {}),
  ...(decodeNotices(r.notices) ? { notices: decodeNotices(r.notices) } : {}),
})
const toKey = (r: KeyRow): ApiKeyRecord => ({
  id: r.id,
  accountId: r.account_id,
  hash: r.hash,
  prefix: r.prefix,
  createdAt: r.created_at,
  ...decodeKeySettings(r.settings),
})
const toFile = (r: FileRow): StoredFile => ({
  id: r.id,
  accountId: r.account_id,
  bytes: r.bytes,
  createdAt: r.created_at,
  filename: r.filename,
  purpose: r.purpose,
  contentType: r.content_type,
  storageKey: r.storage_key,
})
const encodeRecord = (r: GenerationRecord): string =>
  JSON.stringify({
    ...r,
    upstreamCost: r.upstreamCost.toString(),
    discount: r.discount.toString(),
    cost: r.cost.toString(),
    ...(r.unbilledOverage
      ? { unbilledOverage: { usd: r.unbilledOverage.usd.toString(), tokens: r.unbilledOverage.tokens } }
      : {}),
  })
const decodeRecord = (text: string): GenerationRecord => {
  const r = JSON.parse(text) as Omit<GenerationRecord, 'unbilledOverage'> & {
    upstreamCost: string
    discount: string
    cost: string
    unbilledOverage?: { usd: string; tokens: number }
  }
  const { unbilledOverage, ...rest } = r
  return {
    ...rest,
    upstreamCost: BigInt(r.upstreamCost),
    discount: BigInt(r.discount),
    cost: BigInt(r.cost),
    ...(unbilledOverage
      ? { unbilledOverage: { usd: BigInt(unbilledOverage.usd), tokens: unbilledOverage.tokens } }
      : {}),
  }
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

/** Applies the migrations `db` lacks, in one write transaction. */
export function migrateSqlite(db: DatabaseSync, migrations: readonly Migration[] = sqliteMigrations): void {
  db.exec('BEGIN IMMEDIATE')
  try {
    db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL) STRICT')
    const row = db.prepare('SELECT max(version) AS v FROM schema_version').get() as { v: number | null }
    const current = row.v ?? 0
    const latest = migrations.at(-1)?.version ?? 0
    if (current > latest) {
      throw new Error(
        `the database has schema version ${current}, newer than this gateway knows (${latest}): run a newer gateway`,
      )
    }
    for (const m of migrations) {
      if (m.version <= current) continue
      db.exec(m.sql)
      db.prepare('INSERT INTO schema_version (version) VALUES (?)').run(m.version)
    }
    db.exec('COMMIT')
  } catch (err) {
    if (db.isTransaction) db.exec('ROLLBACK')
    throw err
  }
}

/** Accounts of API keys kept in memory for the lookup every request makes, at most. */
export const KEY_CACHE = 10_000
/** SQLite's own automatic checkpoint threshold, in WAL pages (its default). */
export const AUTO_CHECKPOINT_PAGES = 1_000
/** The automatic checkpoint's threshold while the worker thread checkpoints: only a fallback. */
export const FALLBACK_CHECKPOINT_PAGES = 10_000

/** Opens (creating) the file in WAL mode with the current schema; throws on a newer schema. */
export function openSqliteDatabase(path: string, busyTimeoutMs: number): DatabaseSync {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const db = new DatabaseSync(path, { timeout: busyTimeoutMs })
  try {
    db.exec('PRAGMA journal_mode = WAL')
    db.exec('PRAGMA synchronous = NORMAL')
    db.exec('PRAGMA foreign_keys = ON')
    migrateSqlite(db)
  } catch (err) {
    db.close()
    throw err
  }
  return db
}

/** The store on this thread's own connection: the database thread's side (sqlite-worker.ts). */
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
  const get = <T>(text: string, ...params: SQLInputValue[]): T | undefined =>
    sql(text).get(...params) as T | undefined
  const all = <T>(text: string, ...params: SQLInputValue[]): T[] => sql(text).all(...params) as T[]
  const run = (text: string, ...params: SQLInputValue[]): number => Number(sql(text).run(...params).changes)

  // Group commit: the write operations of one turn of the event loop (concurrent requests) run in one
  // transaction, each inside its own savepoint, so one failing undoes only itself. The transaction's
  // fixed costs (the lock, the WAL write of the pages every request touches: the account's row, its
  // rate windows) are paid once per batch, not once per operation. Each caller's promise settles after
  // the COMMIT: nothing is acknowledged before it is durable.
  //
  // Each write carries the deadline its caller stops waiting at (setDeadline): one past it is not
  // begun, and a transaction holding one is rolled back rather than committed late, so a caller told
  // `store_unavailable` was not charged behind its back (only a COMMIT itself stalling can still land).
  interface QueuedWrite {
    fn: () => unknown
    resolve: (value: unknown) => void
    reject: (err: unknown) => void
    deadline: number
    /** False for a read: nothing of it to undo, so no savepoint around it. */
    savepoint: boolean
  }
  let queue: QueuedWrite[] = []
  let scheduled = false
  let deadline = Number.POSITIVE_INFINITY
  const timedOut = (): GatewayError =>
    new GatewayError('store_unavailable', 'the state store did not answer in time')
  const flush = (): void => {
    scheduled = false
    const now = Date.now()
    const batch = queue.filter((w) => w.deadline >= now)
    for (const w of queue) if (w.deadline < now) w.reject(timedOut())
    queue = []
    if (batch.length === 0) return
    const due = Math.min(...batch.map((w) => w.deadline))
    const outcomes: { ok: boolean; value: unknown }[] = []
    try {
      sql('BEGIN IMMEDIATE').run()
      for (const w of batch) {
        if (!w.savepoint) {
          try {
            outcomes.push({ ok: true, value: w.fn() })
          } catch (err) {
            if (databaseFailed(err)) throw err
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
  /** Runs `fn` atomically in the next group commit; database failures become `store_unavailable`. */
  const tx = <T>(fn: () => T, savepoint = true): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      queue.push({ fn, resolve: resolve as (value: unknown) => void, reject, deadline, savepoint })
      if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    })
  /**
   * A read of several statements, one snapshot: it joins the next group commit (no savepoint, no
   * transaction of its own: one lock per batch rather than a BEGIN … COMMIT per read). Its caller
   * waits for that commit, which in the database thread it does anyway (a batch is answered whole).
   */
  const txRead = <T>(fn: () => T): Promise<T> => tx(fn, false)
  /** A single read statement (a snapshot by itself); database failures become `store_unavailable`. */
  const read = <T>(fn: () => T): T => {
    try {
      return fn()
    } catch (err) {
      throw unavailable(err)
    }
  }

  // The open holds of an account, summed by SQLite: one row back however many requests are in flight
  // (a thousand held streams made every new request read a thousand rows). SQLite's sum() of 64-bit
  // integers is exact or fails with "integer overflow"; amounts wider than 18 digits (which CAST would
  // clamp) or a sum past 64 bits are summed here instead, exactly, from the rows.
  const reservedOf = (accountId: string, now: number): bigint => {
    const open = 'FROM reservations WHERE account_id = ? AND expires_at > ?'
    try {
      const r = get<{ widest: number | null; total: string | null }>(
        `SELECT max(length(amount)) AS widest,
           CAST(sum(CASE WHEN length(amount) <= 18 THEN CAST(amount AS INTEGER) END) AS TEXT) AS total ${open}`,
        accountId,
        now,
      )
      if (r?.widest === null || r?.widest === undefined) return 0n
      if (r.widest <= 18 && r.total !== null) return BigInt(r.total)
    } catch (err) {
      if (!/integer overflow/.test((err as Error).message)) throw err
    }
    let sum = 0n
    for (const r of all<{ amount: string }>(`SELECT amount ${open}`, accountId, now)) sum += BigInt(r.amount)
    return sum
  }
  const balanceOf = (accountId: string) =>
    get<{ credits: string; usage: string }>('SELECT credits, usage FROM accounts WHERE id = ?', accountId)
  const creditsOf = (accountId: string, now: number): Credits => {
    const b = balanceOf(accountId)
    if (!b) return { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
    return {
      totalCredits: BigInt(b.credits),
      totalUsage: BigInt(b.usage),
      reserved: reservedOf(accountId, now),
    }
  }
  const mustExist = (accountId: string): { credits: string; usage: string } => {
    const b = balanceOf(accountId)
    if (!b) throw new Error(`unknown account ${accountId}`)
    return b
  }

  // Every request looks its key up, and a statement outside a transaction costs ≈10 µs of file locking
  // however small it is: the accounts of keys seen are kept here. This connection's own changes to
  // accounts or keys clear them at once. Another connection's commit (another process on the file)
  // changes PRAGMA data_version, which is read at most every `keyCacheCheckMs`: a key revoked or an
  // account changed through another process takes effect here within that time. Only keys that exist
  // are kept (unknown keys cost a query, not memory), at most KEY_CACHE.
  const keyCache = new Map<string, KeyLookup>()
  const keyCacheCheckMs = options.keyCacheCheckMs ?? 1_000
  let dataVersion = -1
  let checkedAt = Number.NEGATIVE_INFINITY
  let epoch = 0
  const changedAccounts = (): void => {
    keyCache.clear()
    epoch++
  }
  const findKey = (keyHash: string): KeyLookup | null =>
    read(() => {
      const now = performance.now()
      if (now - checkedAt >= keyCacheCheckMs) {
        const version = get<{ data_version: number }>('PRAGMA data_version')!.data_version
        if (version !== dataVersion) changedAccounts()
        dataVersion = version
        checkedAt = now
      }
      const cached = keyCache.get(keyHash)
      if (cached) return copyLookup(cached)
      const r = get<
        AccountRow & { k_id: string; k_prefix: string; k_created_at: number; k_settings: string }
      >(
        `SELECT a.*, k.id AS k_id, k.prefix AS k_prefix, k.created_at AS k_created_at, k.settings AS k_settings
         FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = ?`,
        keyHash,
      )
      if (!r) return null
      const found: KeyLookup = {
        account: toAccount(r),
        key: toKey({
          hash: keyHash,
          id: r.k_id,
          account_id: r.id,
          prefix: r.k_prefix,
          created_at: r.k_created_at,
          settings: r.k_settings,
        }),
      }
      if (keyCache.size >= KEY_CACHE) keyCache.clear()
      keyCache.set(keyHash, found)
      return copyLookup(found)
    })
  const overdraftOf = (a: Pick<Account, 'overdraft'>): string => (a.overdraft ?? 0n).toString()

  const accounts: AccountStore = {
    async findByKeyHash(keyHash) {
      return findKey(keyHash)?.account ?? null
    },
    async findKey(keyHash) {
      return findKey(keyHash)
    },
    async getKey(accountId, keyHash) {
      const r = read(() =>
        get<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? AND hash = ?', accountId, keyHash),
      )
      return r ? toKey(r) : null
    },
    async updateKey(accountId, keyHash, patch) {
      return tx(() => {
        changedAccounts()
        const r = get<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? AND hash = ?', accountId, keyHash)
        if (!r) return null
        const settings = encodeKeySettings({ ...toKey(r), ...patch })
        run('UPDATE api_keys SET settings = ? WHERE hash = ?', settings, keyHash)
        return toKey({ ...r, settings })
      })
    },
    async get(id) {
      const r = read(() => get<AccountRow>('SELECT * FROM accounts WHERE id = ?', id))
      return r ? toAccount(r) : null
    },
    async create(account, initialCredits) {
      return tx(
        () =>
          run(
            `INSERT INTO accounts (id, name, created_at, discount_ppm, model_discounts_ppm, rate_limits, credits, usage, overdraft, notices)
             VALUES (?, ?, ?, ?, ?, ?, ?, '0', ?, ?) ON CONFLICT (id) DO NOTHING`,
            account.id,
            account.name,
            account.createdAt,
            account.discountPpm,
            JSON.stringify(account.modelDiscountsPpm),
            JSON.stringify(account.rateLimits),
            initialCredits.toString(),
            overdraftOf(account),
            encodeNotices(account.notices),
          ) === 1,
      )
    },
    async update(id, patch) {
      return tx(() => {
        changedAccounts()
        const r = get<AccountRow>('SELECT * FROM accounts WHERE id = ?', id)
        if (!r) return null
        const next: Account = { ...toAccount(r), ...patch, id, createdAt: r.created_at }
        run(
          'UPDATE accounts SET name = ?, discount_ppm = ?, model_discounts_ppm = ?, rate_limits = ?, overdraft = ?, notices = ? WHERE id = ?',
          next.name,
          next.discountPpm,
          JSON.stringify(next.modelDiscountsPpm),
          JSON.stringify(next.rateLimits),
          overdraftOf(next),
          encodeNotices(next.notices),
          id,
        )
        return toAccount({
          ...r,
          name: next.name,
          discount_ppm: next.discountPpm,
          model_discounts_ppm: JSON.stringify(next.modelDiscountsPpm),
          rate_limits: JSON.stringify(next.rateLimits),
          overdraft: overdraftOf(next),
          notices: encodeNotices(next.notices),
        })
      })
    },
    async list() {
      return read(() => all<AccountRow>('SELECT * FROM accounts ORDER BY created_at, id')).map(toAccount)
    },
    async addKey(key) {
      await tx(() => {
        changedAccounts()
        mustExist(key.accountId)
        run(
          `INSERT INTO api_keys (hash, id, account_id, prefix, created_at, settings) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (hash) DO UPDATE SET id = excluded.id, account_id = excluded.account_id,
             prefix = excluded.prefix, created_at = excluded.created_at, settings = excluded.settings`,
          key.hash,
          key.id,
          key.accountId,
          key.prefix,
          key.createdAt,
          encodeKeySettings(key),
        )
      })
    },
    async listKeys(accountId) {
      return read(() =>
        all<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, id', accountId),
      ).map(toKey)
    },
    async removeKey(accountId, keyId) {
      return tx(() => {
        changedAccounts()
        return run('DELETE FROM api_keys WHERE account_id = ? AND id = ?', accountId, keyId) > 0
      })
    },
  }

  /** LedgerStore.reserve, inside a transaction. */
  const reserveNow = (
    accountId: string,
    id: string,
    upperBound: bigint,
    now: number,
    ttlMs: number,
    key?: KeyHold,
  ): { reservation: Reservation | null; keyLimited: boolean } => {
    const b = balanceOf(accountId)
    if (!b) return { reservation: null, keyLimited: false }
    // Expired holds (their request crashed or hung) stop counting; drop them while here.
    run('DELETE FROM reservations WHERE account_id = ? AND expires_at <= ?', accountId, now)
    const available = BigInt(b.credits) - BigInt(b.usage) - reservedOf(accountId, now)
    if (available <= 0n) return { reservation: null, keyLimited: false }
    let amount = upperBound < available ? upperBound : available
    // The key's limit, in the same transaction: its spend counters and its own open holds.
    if (key && key.limit !== null) {
      const room = keyRoom(countersOf(key.hash), key, keyHeldOf(accountId, key.hash, now), now)!
      if (room <= 0n) return { reservation: null, keyLimited: true }
      if (room < amount) amount = room
    }
    const expiresAt = now + ttlMs
    run(
      `INSERT INTO reservations (account_id, id, amount, expires_at, key_hash) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount, expires_at = excluded.expires_at,
         key_hash = excluded.key_hash`,
      accountId,
      id,
      amount.toString(),
      expiresAt,
      key?.hash ?? null,
    )
    return { reservation: { id, accountId, amount, expiresAt }, keyLimited: false }
  }
  const countersOf = (keyHash: string): KeyCounters | undefined =>
    toCounters(get<CountersRow>('SELECT * FROM key_usage WHERE key_hash = ?', keyHash))
  /** The key's open holds (a handful: summed here). */
  const keyHeldOf = (accountId: string, keyHash: string, now: number): bigint => {
    let sum = 0n
    for (const r of all<{ amount: string }>(
      'SELECT amount FROM reservations WHERE account_id = ? AND key_hash = ? AND expires_at > ?',
      accountId,
      keyHash,
      now,
    ))
      sum += BigInt(r.amount)
    return sum
  }

  const ledger: LedgerStore = {
    async credits(accountId, now) {
      // Two statements, one snapshot: read within the group commit (admission asks this of every
      // request before its body).
      return txRead(() => creditsOf(accountId, now))
    },
    async addCredits(accountId, amount, now) {
      return tx(() => {
        const b = mustExist(accountId)
        run(
          'UPDATE accounts SET credits = ? WHERE id = ?',
          (BigInt(b.credits) + amount).toString(),
          accountId,
        )
        return creditsOf(accountId, now)
      })
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      return tx(() => reserveNow(accountId, id, upperBound, now, ttlMs).reservation)
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      return tx(() => reserveNow(accountId, id, upperBound, now, ttlMs, key))
    },
    async keyUsage(accountId, keyHashes, now) {
      return txRead(() => keyHashes.map((h) => usageAt(countersOf(h), keyHeldOf(accountId, h, now), now)))
    },
    async renew(ref, now, ttlMs) {
      return tx(
        () =>
          run(
            'UPDATE reservations SET expires_at = ? WHERE account_id = ? AND id = ? AND expires_at > ?',
            now + ttlMs,
            ref.accountId,
            ref.id,
            now,
          ) > 0,
      )
    },
    async settle(ref, input, limit) {
      if (input.accountId !== ref.accountId) {
        throw new Error(`generation ${input.generationId} settled against another account's reservation`)
      }
      return tx(() => {
        const b = get<{ credits: string; usage: string; overdraft: string }>(
          'SELECT credits, usage, overdraft FROM accounts WHERE id = ?',
          ref.accountId,
        )
        if (!b) throw new Error(`unknown account ${ref.accountId}`)
        const now = limit?.now ?? input.createdAt + input.generationTimeMs
        const hold = get<{ amount: string }>(
          'SELECT amount FROM reservations WHERE account_id = ? AND id = ? AND expires_at > ?',
          ref.accountId,
          ref.id,
          now,
        )
        const held = limit?.held ?? (hold ? BigInt(hold.amount) : undefined)
        const keyHash =
          input.keyHash ??
          get<{ key_hash: string | null }>(
            'SELECT key_hash FROM reservations WHERE account_id = ? AND id = ?',
            ref.accountId,
            ref.id,
          )?.key_hash ??
          undefined
        const charged =
          hold && held !== undefined && input.cost <= held
            ? input
            : capCharge(
                input,
                chargeCeiling({
                  held,
                  overdraft: BigInt(b.overdraft),
                  // The other open holds: this one is still in the sum.
                  free:
                    BigInt(b.credits) -
                    BigInt(b.usage) -
                    (reservedOf(ref.accountId, now) - (hold ? BigInt(hold.amount) : 0n)),
                }),
              )
        const record =
          keyHash === undefined || charged.keyHash === keyHash ? charged : { ...charged, keyHash }
        // The UNIQUE generation id makes the charge happen once: a repeat inserts nothing.
        const inserted = run(
          `INSERT INTO generations (generation_id, account_id, created_at, cost, record, key_hash) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (generation_id) DO NOTHING`,
          record.generationId,
          record.accountId,
          record.createdAt,
          record.cost.toString(),
          encodeRecord(record),
          keyHash ?? null,
        )
        if (inserted === 0) return null
        if (keyHash !== undefined) {
          const c = chargeCounters(countersOf(keyHash) ?? noCounters(), record.createdAt, record.cost)
          run(
            `INSERT INTO key_usage (key_hash, total, day_start, day, week_start, week, month_start, month)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (key_hash) DO UPDATE SET total = excluded.total, day_start = excluded.day_start,
               day = excluded.day, week_start = excluded.week_start, week = excluded.week,
               month_start = excluded.month_start, month = excluded.month`,
            keyHash,
            c.total.toString(),
            c.dayStart,
            c.day.toString(),
            c.weekStart,
            c.week.toString(),
            c.monthStart,
            c.month.toString(),
          )
        }
        run('DELETE FROM reservations WHERE account_id = ? AND id = ?', ref.accountId, ref.id)
        run(
          'UPDATE accounts SET usage = ? WHERE id = ?',
          (BigInt(b.usage) + record.cost).toString(),
          ref.accountId,
        )
        return record
      })
    },
    async release(ref) {
      await tx(() => run('DELETE FROM reservations WHERE account_id = ? AND id = ?', ref.accountId, ref.id))
    },
  }

  const generations: GenerationStore = {
    async get(id) {
      const r = read(() =>
        get<{ record: string }>('SELECT record FROM generations WHERE generation_id = ?', id),
      )
      return r ? decodeRecord(r.record) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      const rows = read(() => {
        // Filtered by key, through its own index (generations_by_key); the model lives in the
        // record's JSON, so a listing filtered by model reads the account's rows.
        const byKey = keyHash === undefined ? '' : 'AND key_hash = ?'
        const keyArg = keyHash === undefined ? [] : [keyHash]
        const byModel = model === undefined ? '' : "AND json_extract(record, '$.model') = ?"
        const modelArg = model === undefined ? [] : [model]
        if (before === undefined) {
          return all<{ generation_id: string; record: string }>(
            `SELECT generation_id, record FROM generations WHERE account_id = ? ${byKey} ${byModel}
             ORDER BY seq DESC LIMIT ?`,
            accountId,
            ...keyArg,
            ...modelArg,
            limit + 1,
          )
        }
        const at = get<{ seq: number }>(
          'SELECT seq FROM generations WHERE account_id = ? AND generation_id = ?',
          accountId,
          before,
        )
        if (!at) return []
        return all<{ generation_id: string; record: string }>(
          `SELECT generation_id, record FROM generations WHERE account_id = ? ${byKey} AND seq < ? ${byModel}
           ORDER BY seq DESC LIMIT ?`,
          accountId,
          ...keyArg,
          at.seq,
          ...modelArg,
          limit + 1,
        )
      })
      const page = rows.slice(0, limit)
      const more = rows.length > limit && page.length > 0
      return {
        data: page.map((r) => decodeRecord(r.record)),
        nextCursor: more ? page.at(-1)!.generation_id : null,
      }
    },
    async activity(accountId, since, until) {
      const [costHigh, costLow] = splitSumSql('cost')
      const [upHigh, upLow] = splitSumSql("json_extract(record, '$.upstreamCost')")
      const rows = read(() =>
        all<{
          day: number
          model: string
          requests: number
          prompt: number | null
          completion: number | null
          cost_high: number
          cost_low: number
          up_high: number
          up_low: number
        }>(
          `SELECT created_at - created_at % ${DAY_MS} AS day, json_extract(record, '$.model') AS model,
             count(*) AS requests,
             sum(json_extract(record, '$.usage.prompt_tokens')) AS prompt,
             sum(json_extract(record, '$.usage.completion_tokens')) AS completion,
             ${costHigh} AS cost_high, ${costLow} AS cost_low, ${upHigh} AS up_high, ${upLow} AS up_low
           FROM generations WHERE account_id = ? AND created_at >= ? AND created_at < ?
           GROUP BY 1, 2`,
          accountId,
          since,
          until,
        ),
      )
      return rows
        .map((r) => ({
          day: Number(r.day),
          model: r.model,
          requests: Number(r.requests),
          promptTokens: Number(r.prompt ?? 0),
          completionTokens: Number(r.completion ?? 0),
          upstreamCost: joinSplitSum(r.up_high, r.up_low),
          cost: joinSplitSum(r.cost_high, r.cost_low),
        }))
        .sort(byDayThenModel)
    },
  }

  /** RateLimitStore.consume, inside a transaction. */
  const consumeNow = (
    checks: readonly RateCheck[],
    windowMs: number,
    now: number,
  ): { allowed: boolean; decisions: RateDecision[] } => {
    if (checks.length === 0) return { allowed: true, decisions: [] }
    // The same sliding one-window counters as the memory store, loaded and written back here.
    const windows = new Map<string, WindowRow>()
    const windowOf = (key: string): WindowRow => {
      let w = windows.get(key)
      if (w) return w
      w = get<WindowRow>('SELECT start, current, previous, window_ms FROM rate_windows WHERE key = ?', key)
      w = w ? { ...w } : { start: now - (now % windowMs), current: 0, previous: 0, window_ms: windowMs }
      rollWindow(w, windowMs, now)
      w.window_ms = windowMs
      windows.set(key, w)
      return w
    }
    const decided = consumeWindows(checks, windowOf, windowMs, now)
    for (const [key, w] of windows) writeWindow(key, w)
    return decided
  }

  // One store call, one savepoint in the group commit, for each step of a request's admission.
  const admission: AdmissionStore = {
    async beforeBody(accountId, checks, windowMs, now, credits) {
      return tx(() => {
        const { allowed, decisions } = consumeNow(checks, windowMs, now)
        if (!allowed || !credits) return { allowed, decisions, hasCredits: null }
        const c = creditsOf(accountId, now)
        return { allowed, decisions, hasCredits: c.totalCredits - c.totalUsage - c.reserved > 0n }
      }, checks.length > 0)
    },
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs, key) {
      return tx(() => {
        const { allowed, decisions } = consumeNow(checks, windowMs, now)
        if (!allowed) return { allowed, decisions, reservation: null }
        const held = reserveNow(accountId, id, upperBound, now, ttlMs, key)
        return key ? { allowed, decisions, ...held } : { allowed, decisions, reservation: held.reservation }
      })
    },
  }

  const rateLimits: RateLimitStore = {
    async sweep(now) {
      await tx(() => run('DELETE FROM rate_windows WHERE ? - start >= 2 * window_ms', now))
    },
    async consume(checks, windowMs, now) {
      if (checks.length === 0) return { allowed: true, decisions: [] }
      return tx(() => consumeNow(checks, windowMs, now))
    },
    async adjust(key, delta, windowMs, now) {
      await tx(() => {
        const start = now - (now % windowMs)
        const w = get<WindowRow>(
          'SELECT start, current, previous, window_ms FROM rate_windows WHERE key = ?',
          key,
        )
        const next: WindowRow = w
          ? { ...w, window_ms: windowMs }
          : { start, current: 0, previous: 0, window_ms: windowMs }
        rollWindow(next, windowMs, now)
        next.current = Math.max(0, next.current + delta)
        writeWindow(key, next)
      })
    },
  }
  const writeWindow = (key: string, w: WindowRow): void => {
    run(
      `INSERT INTO rate_windows (key, window_ms, start, current, previous) VALUES (?, ?, ?, ?, ?)
       ON CONFLICT (key) DO UPDATE SET window_ms = excluded.window_ms, start = excluded.start,
         current = excluded.current, previous = excluded.previous`,
      key,
      w.window_ms,
      w.start,
      w.current,
      w.previous,
    )
  }

  const usageOf = (accountId: string) =>
    get<{ files: number; bytes: number }>(
      'SELECT count(*) AS files, coalesce(sum(bytes), 0) AS bytes FROM files WHERE account_id = ?',
      accountId,
    )!

  const files: FileStore = {
    async reserve(accountId, quota, now, ttlMs) {
      return tx(() => {
        run('DELETE FROM file_holds WHERE account_id = ? AND expires_at <= ?', accountId, now)
        const u = usageOf(accountId)
        const held = get<{ n: number }>(
          'SELECT count(*) AS n FROM file_holds WHERE account_id = ?',
          accountId,
        )!.n
        if (u.files + held >= quota.maxFiles) return { ok: false, reason: 'files' } as const
        if (u.bytes >= quota.maxBytes) return { ok: false, reason: 'bytes' } as const
        const token = randomUUID()
        run(
          'INSERT INTO file_holds (token, account_id, expires_at) VALUES (?, ?, ?)',
          token,
          accountId,
          now + ttlMs,
        )
        return { ok: true, token, bytesLeft: quota.maxBytes - u.bytes } as const
      })
    },
    async commit(token, file, quota, now) {
      return tx(() => {
        const hold = get<{ account_id: string; expires_at: number }>(
          'SELECT account_id, expires_at FROM file_holds WHERE token = ?',
          token,
        )
        if (!hold) return false
        if (hold.account_id !== file.accountId) throw new Error('file reservation of another account')
        run('DELETE FROM file_holds WHERE token = ?', token)
        if (hold.expires_at <= now) return false
        if (usageOf(file.accountId).bytes + file.bytes > quota.maxBytes) return false
        run(
          `INSERT INTO files (id, account_id, bytes, created_at, filename, purpose, content_type, storage_key)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
          file.id,
          file.accountId,
          file.bytes,
          file.createdAt,
          file.filename,
          file.purpose,
          file.contentType,
          file.storageKey,
        )
        return true
      })
    },
    async release(token) {
      await tx(() => run('DELETE FROM file_holds WHERE token = ?', token))
    },
    async get(accountId, id) {
      const r = read(() => get<FileRow>('SELECT * FROM files WHERE account_id = ? AND id = ?', accountId, id))
      return r ? toFile(r) : null
    },
    async list(accountId, query) {
      const asc = query.order === 'asc'
      const rows = read(() => {
        let from: number | undefined
        if (query.after !== undefined) {
          const at = get<{ seq: number; purpose: string }>(
            'SELECT seq, purpose FROM files WHERE account_id = ? AND id = ?',
            accountId,
            query.after,
          )
          if (!at || (query.purpose !== undefined && at.purpose !== query.purpose)) return []
          from = at.seq
        }
        const purpose = query.purpose ?? null
        const bound = from ?? (asc ? -1 : Number.MAX_SAFE_INTEGER)
        return asc
          ? all<FileRow>(
              `SELECT * FROM files WHERE account_id = ? AND (? IS NULL OR purpose = ?) AND seq > ?
               ORDER BY seq ASC LIMIT ?`,
              accountId,
              purpose,
              purpose,
              bound,
              query.limit + 1,
            )
          : all<FileRow>(
              `SELECT * FROM files WHERE account_id = ? AND (? IS NULL OR purpose = ?) AND seq < ?
               ORDER BY seq DESC LIMIT ?`,
              accountId,
              purpose,
              purpose,
              bound,
              query.limit + 1,
            )
      })
      return { files: rows.slice(0, query.limit).map(toFile), hasMore: rows.length > query.limit }
    },
    async delete(accountId, id) {
      return tx(() => {
        const r = get<FileRow>('SELECT * FROM files WHERE account_id = ? AND id = ?', accountId, id)
        if (!r) return null
        run('DELETE FROM files WHERE seq = ?', r.seq)
        return toFile(r)
      })
    },
    async usage(accountId) {
      return read(() => ({ ...usageOf(accountId) }))
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const rows = read(() =>
        all<{ storage_key: string }>(
          'SELECT storage_key FROM files WHERE storage_key IN (SELECT value FROM json_each(?))',
          JSON.stringify(storageKeys),
        ),
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }

  const appliedConfig: AppliedConfigStore = {
    async get(accountId) {
      const r = read(() =>
        get<{ snapshot: string }>('SELECT snapshot FROM config_applied WHERE account_id = ?', accountId),
      )
      return r?.snapshot ?? null
    },
    async set(accountId, snapshot) {
      await tx(() =>
        run(
          `INSERT INTO config_applied (account_id, snapshot) VALUES (?, ?)
           ON CONFLICT (account_id) DO UPDATE SET snapshot = excluded.snapshot`,
          accountId,
          snapshot,
        ),
      )
    },
  }

  const retentionMs = options.retentionDays === undefined ? undefined : options.retentionDays * DAY_MS

  return {
    cacheEpoch: () => epoch,
    setDeadline(at) {
      deadline = at
    },
    setAutoCheckpoint(pages) {
      if (db.isOpen) db.exec(`PRAGMA wal_autocheckpoint = ${pages}`)
    },
    accounts,
    files,
    ledger,
    generations,
    rateLimits,
    admission,
    appliedConfig,
    ...createSqliteTaskStores({ get, all, run, tx, read }),
    responses: createSqliteResponseStore({ get, all, run, tx, read }),
    async ping() {
      read(() => get('SELECT 1'))
    },
    async sweep(now) {
      await tx(() => {
        run('DELETE FROM reservations WHERE expires_at <= ?', now)
        run('DELETE FROM file_holds WHERE expires_at <= ?', now)
        run('DELETE FROM rate_windows WHERE ? - start >= 2 * window_ms', now)
        // Old records go; the accounts' usage is a column, not their sum, so totals stay.
        if (retentionMs !== undefined) run('DELETE FROM generations WHERE created_at < ?', now - retentionMs)
        if (retentionMs !== undefined) run('DELETE FROM responses WHERE created_at < ?', now - retentionMs)
      })
    },
    async close() {
      if (!db.isOpen) return
      flush()
      cache.clear()
      db.close()
    },
  }
}

/**
 * Moves WAL checkpoints off the event loop (see sqlite-checkpointer.ts): SQLite's automatic checkpoint,
 * which the commit that crosses its threshold runs (≈0.4 ms on average per group commit here, some
 * over 10 ms), becomes a fallback at a ten times larger threshold. Should the thread fail (it did on a
 * full disk), the automatic checkpoint is set back to SQLite's default and the thread is started again
 * after a backoff (`checkpointerRestartMs`, doubling up to a minute; back to the first after a
 * checkpoint succeeds).
 */
export function startCheckpointer(
  path: string,
  options: SqliteStoreOptions,
  setAutoCheckpoint: (pages: number) => void,
): { stop: () => Promise<void> } | undefined {
  const intervalMs = options.checkpointIntervalMs ?? 250
  if (intervalMs <= 0) return undefined
  const data: CheckpointerData = { path, intervalMs, busyTimeoutMs: options.busyTimeoutMs ?? 5000 }
  const script = options.checkpointerScript ?? new URL('./sqlite-checkpointer.ts', import.meta.url)
  const firstDelayMs = options.checkpointerRestartMs ?? 1000
  let stopping = false
  let failures = 0
  let restartTimer: NodeJS.Timeout | undefined
  let exited: Promise<void> = Promise.resolve()
  let worker: Worker | undefined

  const start = (): void => {
    restartTimer = undefined
    if (stopping) return
    const w = new Worker(script, { workerData: data })
    worker = w
    w.unref()
    setAutoCheckpoint(FALLBACK_CHECKPOINT_PAGES)
    let failed = false
    const fail = (err: unknown): void => {
      if (failed || stopping) return
      failed = true
      void w.terminate()
      setAutoCheckpoint(AUTO_CHECKPOINT_PAGES)
      const delay = Math.min(60_000, firstDelayMs * 2 ** Math.min(failures, 16))
      failures++
      options.onCheckpointerError?.(err, delay)
      restartTimer = setTimeout(() => {
        start()
        options.onCheckpointerRestart?.()
      }, delay)
      restartTimer.unref()
    }
    w.on('message', (m: CheckpointReport) => {
      failures = 0
      options.onCheckpoint?.(m)
    })
    w.on('error', fail)
    w.on('exit', (code) => fail(new Error(`the checkpoint thread exited with code ${code}`)))
    exited = new Promise<void>((resolve) => w.once('exit', () => resolve()))
  }
  start()
  return {
    stop: async () => {
      stopping = true
      clearTimeout(restartTimer)
      worker?.postMessage('stop')
      await exited
    },
  }
}

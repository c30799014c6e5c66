import { GatewayError } from '../errors.ts'

// The one rule, for both SQL backends, of what a database error means to a client.
//
// A failure of the database ITSELF — it cannot be reached or was cut off, it is out of resources
// (connections, memory, disk, a lock held past the wait), it is shutting down or closed, or its disk
// fails — says nothing about the request: the store is unavailable, the client gets 503
// `store_unavailable` and may retry. Anything else the database refuses — a constraint (a unique,
// foreign-key, check or not-null rule), a statement it cannot run (bad SQL, a missing table, a type or
// range error) — is a bug of the gateway: it is thrown as it is, logged, and answered 500
// `internal_error`. A constraint is never "unavailable": retrying the same write breaks it again.
//
// Each backend names the condition of its driver's error (SQLite's result code, PostgreSQL's
// SQLSTATE); `toStoreError` applies the rule.

/** What went wrong in the database, in terms both backends share. */
export type DatabaseCondition =
  | 'connection' // unreachable, refused, reset, terminated
  | 'resources' // too many connections, out of memory, disk full, busy or locked past the wait
  | 'shutdown' // shutting down, starting up, or the handle is closed
  | 'io' // the disk failed to read or write, or the file is not a usable database
  | 'constraint' // a unique, foreign-key, check or not-null rule refused the write
  | 'statement' // bad SQL, a missing table or column, a type, size or range error
  | 'other'

const UNAVAILABLE: ReadonlySet<DatabaseCondition> = new Set(['connection', 'resources', 'shutdown', 'io'])

/** Whether the rule answers this condition 503 `store_unavailable` (else: a bug, 500). */
export function isUnavailable(condition: DatabaseCondition): boolean {
  return UNAVAILABLE.has(condition)
}

/** `err` as the gateway reports it: 503 `store_unavailable` (with `err` as its cause) or `err` itself. */
export function toStoreError(err: unknown, condition: DatabaseCondition): unknown {
  return isUnavailable(condition)
    ? new GatewayError('store_unavailable', 'the state store is unavailable', { cause: err })
    : err
}

/** SQLite primary result codes (the low byte of node:sqlite's `errcode`), https://sqlite.org/rescode.html */
const SQLITE_CONDITIONS: Record<number, DatabaseCondition> = {
  1: 'statement', // SQLITE_ERROR: an SQL error or a missing table
  3: 'io', // SQLITE_PERM
  5: 'resources', // SQLITE_BUSY: locked by another connection past busy_timeout
  6: 'resources', // SQLITE_LOCKED
  7: 'resources', // SQLITE_NOMEM
  8: 'io', // SQLITE_READONLY: the file or its directory cannot be written
  10: 'io', // SQLITE_IOERR
  11: 'io', // SQLITE_CORRUPT
  13: 'resources', // SQLITE_FULL: the disk is full
  14: 'io', // SQLITE_CANTOPEN
  15: 'resources', // SQLITE_PROTOCOL: a locking race
  18: 'statement', // SQLITE_TOOBIG
  19: 'constraint', // SQLITE_CONSTRAINT
  20: 'statement', // SQLITE_MISMATCH
  21: 'statement', // SQLITE_MISUSE
  25: 'statement', // SQLITE_RANGE
  26: 'io', // SQLITE_NOTADB
}

/**
 * The condition of a node:sqlite error, or undefined when `err` is not one (a caller's mistake thrown
 * on purpose inside a transaction, which is not the database's to judge).
 */
export function sqliteCondition(err: unknown): DatabaseCondition | undefined {
  const e = err as { code?: unknown; errcode?: unknown } | null
  // The database handle is closed (the store is shutting down or its thread restarting).
  if (e?.code === 'ERR_INVALID_STATE') return 'shutdown'
  if (e?.code !== 'ERR_SQLITE_ERROR') return undefined
  return typeof e.errcode === 'number' ? (SQLITE_CONDITIONS[e.errcode & 0xff] ?? 'other') : 'other'
}

/**
 * The condition of a PostgreSQL error by its SQLSTATE (https://www.postgresql.org/docs/current/errcodes-appendix.html);
 * undefined for an error without one (a socket error, pg's own connection errors): 'connection'.
 */
export function postgresCondition(sqlstate: string | undefined): DatabaseCondition {
  if (sqlstate === undefined || sqlstate === '') return 'connection'
  if (sqlstate.startsWith('08')) return 'connection' // connection exception
  if (sqlstate.startsWith('53')) return 'resources' // insufficient resources
  if (sqlstate.startsWith('57P0')) return 'shutdown' // admin/crash shutdown, cannot connect now
  if (sqlstate.startsWith('58')) return 'io' // system error (I/O)
  if (sqlstate.startsWith('23')) return 'constraint' // integrity constraint violation
  if (/^(42|22|0A)/.test(sqlstate)) return 'statement' // syntax/undefined object, data exception
  return 'other'
}

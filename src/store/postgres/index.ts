import type pg from 'pg'
import type { Store } from '../types.ts'
import type { Logger } from '../../logger.ts'
import { redactUrl } from '../database-url.ts'
import { createAccounts, createAppliedConfig } from './accounts.ts'
import { createAdmission } from './admission.ts'
import type { Batch } from './batch.ts'
import { createFiles } from './files.ts'
import { createGenerations } from './generations.ts'
import { createKeyCache, listenForAccountChanges } from './key-cache.ts'
import { createKeys } from './keys.ts'
import { createCreditsKnown, createLedger } from './ledger.ts'
import { migrate } from './migrations.ts'
import { createQueries, openPool, type Query, type Transaction } from './pool.ts'
import { createRateLimits } from './rate-limits.ts'
import { createPostgresResponseStore } from './responses.ts'
import { createPostgresTaskStores } from './tasks.ts'

// The PostgreSQL backend: every instance of the gateway pointed at one database behaves as one
// gateway. Every read-modify-write is one statement, or one transaction that first locks the row
// that decides (the account's ledger row, its file totals, the rate windows in key order), so two
// processes never both spend the same credit. Money travels as decimal strings (NUMERIC(40,0)
// picodollars), never as a JavaScript number.
//
// Failures of the database itself become `store_unavailable` (503) by the rule both SQL backends share
// (sql-errors.ts); the pool reconnects by itself when the database is back. Any other database error
// is a bug and is thrown as it is.
//
// This file only opens, migrates and composes. One file a concern, the same names as the other
// backends: accounts, keys (with key-cache: the LISTEN/NOTIFY lookup cache), ledger (which also writes
// the generation records), generations, files, rate-limits, admission, tasks, responses, migrations;
// and this backend's own: pool (the pool, query and transaction) and batch (group commit).

export interface PostgresStoreOptions {
  log?: Logger
  /** Connections per gateway process (default 10). */
  poolSize?: number
  /** Generation records older than this are deleted by `sweep` (the ledger's totals stay). */
  retentionDays?: number
  /**
   * Group commit (batch.ts) of key lookups, credit reads, reserves, settles and rate-limit
   * consumes: batches of one kind on their way at once (default 2) and most calls in one (default 256);
   * false sends every call on its own.
   */
  batch?: { maxInFlight?: number; maxBatch?: number } | false
  /** Told every statement sent (its kind: the prepared statement's name, else `query`), for counters. */
  onRoundTrip?: (kind: string) => void
  /**
   * Told when this instance has forgotten its cached key lookups because accounts or keys changed in
   * any instance (a notification arrived), or its listening connection was (re)opened (tests).
   */
  onAccountsChanged?: () => void
  /**
   * How long an account seen with credits is answered so before a request's body without asking the
   * database (default 1000 ms; 0: always asked).
   */
  creditsKnownMs?: number
}

export async function createPostgresStore(url: string, options: PostgresStoreOptions): Promise<Store> {
  const { log } = options
  const pool = openPool(url, options.poolSize ?? 10, log)
  const { query, transaction, statements } = createQueries(pool, options)
  await migrateOrClose(url, pool, transaction, log)

  const batch = batchOptions(options.batch)
  const rateLimits = createRateLimits(query, batch)
  const known = createCreditsKnown(options.creditsKnownMs ?? 1_000)
  const keyCache = createKeyCache()
  const listener = listenForAccountChanges(url, keyCache, options)
  const retentionMs = options.retentionDays === undefined ? undefined : options.retentionDays * 86_400_000
  return {
    accounts: { ...createAccounts(query, keyCache), ...createKeys(query, transaction, batch, keyCache) },
    ledger: createLedger(query, batch, known),
    generations: createGenerations(query),
    files: createFiles(query, transaction),
    rateLimits,
    admission: createAdmission(query, batch, known),
    ...createPostgresTaskStores(query, transaction),
    responses: createPostgresResponseStore(query),
    async ping() {
      await query('SELECT 1')
    },
    statements: () => statements,
    appliedConfig: createAppliedConfig(query),
    async sweep(now) {
      await sweepExpired(query, transaction, now)
      await rateLimits.sweep(now)
      if (retentionMs !== undefined) {
        await query('DELETE FROM generations WHERE created_at < $1', [now - retentionMs])
        await query('DELETE FROM responses WHERE created_at < $1', [now - retentionMs])
      }
    },
    async close() {
      await listener.close()
      await pool.end()
    },
  }
}

/** The schema brought up to date; on failure the pool is ended before the error is thrown. */
async function migrateOrClose(
  url: string,
  pool: pg.Pool,
  transaction: Transaction,
  log: Logger | undefined,
): Promise<void> {
  try {
    const applied = await migrate(transaction, log)
    log?.info({ database: redactUrl(url), applied }, 'postgres store ready')
  } catch (err) {
    await pool.end().catch(() => {})
    throw err
  }
}

/** Expired credit holds and file holds go. */
async function sweepExpired(query: Query, transaction: Transaction, now: number): Promise<void> {
  // Each account's ledger row is locked first, in account order, as every batch does (the triggers
  // of migration 13 update it when its holds go): a sweep never deadlocks with a batch.
  await transaction(async (q) => {
    const { rows } = await q<{ account_id: string }>(
      `SELECT account_id FROM ledger WHERE account_id IN (
             SELECT account_id FROM reservations WHERE expires_at <= $1)
           ORDER BY account_id FOR NO KEY UPDATE`,
      [now],
    )
    if (rows.length === 0) return
    await q('DELETE FROM reservations WHERE expires_at <= $1 AND account_id = ANY ($2::text[])', [
      now,
      rows.map((r) => r.account_id),
    ])
  })
  await query('DELETE FROM file_holds WHERE expires_at <= $1', [now])
}

function batchOptions(o: PostgresStoreOptions['batch']): Batch {
  if (o === false) return null
  return { maxInFlight: o?.maxInFlight ?? 2, maxBatch: o?.maxBatch ?? 256 }
}

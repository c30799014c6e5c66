import pg from 'pg'
import type { PoolClient, QueryResult, QueryResultRow } from 'pg'
import type { Logger } from '../../logger.ts'
import { postgresCondition, toStoreError as toSqlStoreError } from '../sql-errors.ts'

// The connection pool and the two ways every concern file talks to it: `query` (one statement on any
// connection) and `transaction` (several on one). Both count what they send and turn a failure of the
// database itself into `store_unavailable` by sql-errors.ts's rule; money crosses as decimal strings.

const { Pool, DatabaseError } = pg

export { DatabaseError }

/** A statement with a `name` is prepared once per connection and then sent as name and values only. */
export type Query = <R extends QueryResultRow>(
  text: string,
  values?: unknown[],
  name?: string,
) => Promise<QueryResult<R>>

export type Transaction = <T>(fn: (q: Query) => Promise<T>) => Promise<T>

/** A driver failure by sql-errors.ts's rule (socket errors and pg's own have no SQLSTATE: unreachable). */
export function toStoreError(err: unknown): unknown {
  return toSqlStoreError(err, postgresCondition(err instanceof DatabaseError ? err.code : undefined))
}

export const money = (v: bigint): string => v.toString()
export const toMoney = (v: unknown): bigint => BigInt(String(v))

/** A foreign key to accounts failed: the caller named an account that does not exist. */
export const isUnknownAccount = (err: unknown): boolean =>
  err instanceof DatabaseError && err.code === '23503'

export function openPool(url: string, poolSize: number, log: Logger | undefined): pg.Pool {
  const pool = new Pool({
    connectionString: url,
    max: poolSize,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    // A connection that stops answering (a partition rather than a refusal) fails the call instead of
    // hanging it; the pool then discards that connection.
    query_timeout: 15_000,
    keepAlive: true,
    application_name: 'junction',
  })
  // A connection that dies while idle in the pool emits 'error' on the pool, and one that dies while
  // checked out emits it on the client: unhandled, either would end the process.
  pool.on('error', (err) => log?.warn({ err: { message: err.message } }, 'postgres connection lost'))
  pool.on('connect', (client) => {
    client.on('error', (err) => log?.debug({ err: { message: err.message } }, 'postgres connection error'))
  })
  return pool
}

/**
 * `query` and `transaction` on `pool`; `statements` counts what was sent by kind (the prepared
 * statement's name, else `query`), and `options.onRoundTrip` is told each one.
 */
export function createQueries(
  pool: pg.Pool,
  options: { onRoundTrip?: (kind: string) => void },
): { query: Query; transaction: Transaction; statements: Map<string, number> } {
  const statements = new Map<string, number>()
  const run = async <R extends QueryResultRow>(
    runner: pg.Pool | PoolClient,
    text: string,
    values?: unknown[],
    name?: string,
  ): Promise<QueryResult<R>> => {
    const kind = name ?? 'query'
    statements.set(kind, (statements.get(kind) ?? 0) + 1)
    options.onRoundTrip?.(kind)
    try {
      return await (name === undefined
        ? runner.query<R>(text, values)
        : runner.query<R>({ name, text, ...(values ? { values } : {}) }))
    } catch (err) {
      throw toStoreError(err)
    }
  }
  const query: Query = (text, values, name) => run(pool, text, values, name)

  /** Runs `fn` in one transaction; on any error the connection is discarded, which rolls it back. */
  const transaction = async <T>(fn: (q: Query) => Promise<T>): Promise<T> => {
    let client: PoolClient
    try {
      client = await pool.connect()
    } catch (err) {
      throw toStoreError(err)
    }
    const q: Query = (text, values, name) => run(client, text, values, name)
    try {
      await q('BEGIN')
      const result = await fn(q)
      await q('COMMIT')
      client.release()
      return result
    } catch (err) {
      client.release(true)
      throw err
    }
  }
  return { query, transaction, statements }
}

import { randomBytes } from 'node:crypto'
import pg from 'pg'

// A database of its own on the local PostgreSQL for a bench run, dropped after it. BENCH_PG_URL is
// the server's admin URL (a database the bench may connect to and create others from).

export const PG_ADMIN_URL = process.env['BENCH_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres'

export interface ThrowawayDatabase {
  /** The new database's URL (the admin URL's, with its name). */
  url: string
  /** Drops it, even with sessions still open. */
  drop: () => Promise<void>
}

export async function createThrowawayDatabase(adminUrl = PG_ADMIN_URL): Promise<ThrowawayDatabase> {
  const name = `junction_bench_${randomBytes(6).toString('hex')}`
  const asAdmin = async (sql: string): Promise<void> => {
    const admin = new pg.Client(adminUrl)
    await admin.connect()
    try {
      await admin.query(sql)
    } finally {
      await admin.end()
    }
  }
  await asAdmin(`CREATE DATABASE ${name}`)
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return { url: url.toString(), drop: () => asAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`) }
}

import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { afterAll } from 'vitest'

// A fresh PostgreSQL database per test file, on the local server (127.0.0.1:5432, trust auth).
// JUNCTION_TEST_PG_URL overrides the admin URL. PostgreSQL not running is a failure, never a skip:
// the PostgreSQL backend would otherwise go untested without anyone noticing.

const ADMIN_URL = process.env['JUNCTION_TEST_PG_URL'] ?? 'postgres://postgres@127.0.0.1:5432/postgres'

export interface TestDatabase {
  /** The URL of the new database (same server and user as the admin URL). */
  url: string
  drop(): Promise<void>
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL, connectionTimeoutMillis: 5_000 })
  try {
    await client.connect()
  } catch (err) {
    await client.end().catch(() => {})
    throw new Error(
      `PostgreSQL is not reachable at ${new URL(ADMIN_URL).host} (${(err as Error).message}). ` +
        'Start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` ' +
        '(or set JUNCTION_TEST_PG_URL to an admin URL of another server).',
      { cause: err },
    )
  }
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `junction_test_${randomBytes(6).toString('hex')}`
  await withAdmin((c) => c.query(`CREATE DATABASE ${name}`))
  const url = new URL(ADMIN_URL)
  url.pathname = `/${name}`
  return {
    url: url.toString(),
    drop: () => withAdmin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => {}),
  }
}

/**
 * One test database for the calling test file, created by the first test that asks for it and
 * dropped after the file. With PostgreSQL down every test that needs it fails with the message above
 * (a failing beforeAll would only report them as skipped).
 */
export function useTestDatabase(): () => Promise<TestDatabase> {
  let db: Promise<TestDatabase> | undefined
  afterAll(async () => {
    const created = await db?.catch(() => undefined)
    await created?.drop()
  })
  return () => (db ??= createTestDatabase())
}

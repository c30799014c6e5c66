import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { createPostgresStore } from '../src/store/postgres/index.ts'
import { createSqliteStore } from '../src/store/sqlite/index.ts'
import type { Store } from '../src/store/types.ts'
import { createThrowawayDatabase, type ThrowawayDatabase } from './throwaway-database.ts'

// What a hold costs a store as an account's open holds grow (requests in flight: held streams,
// long agent calls). For each count in BENCH_OPEN_HOLDS (default 0,1000,5000, cumulative), that many
// holds are taken and left open, then BENCH_OPS (2000) holds are taken and released, 50 at a time; the
// wall time per hold and release is printed. BENCH_KEY=1: every hold is made with an API key that has
// a spending limit (its own open holds are then counted too). BENCH_STORE=postgres: a throwaway
// database on the local PostgreSQL (BENCH_PG_URL: its admin URL) instead of a SQLite file. Records
// figures, asserts nothing. `node bench/open-holds.ts`.

const counts = (process.env['BENCH_OPEN_HOLDS'] ?? '0,1000,5000').split(',').map(Number)
const ops = Number(process.env['BENCH_OPS'] ?? 2000)
const withKey = process.env['BENCH_KEY'] === '1'
const dir = await mkdtemp(join(tmpdir(), 'junction-open-holds-'))
let database: ThrowawayDatabase | undefined
let store: Store
if (process.env['BENCH_STORE'] === 'postgres') {
  database = await createThrowawayDatabase()
  store = await createPostgresStore(database.url, {})
} else {
  store = createSqliteStore(join(dir, 'junction.db'))
}
try {
  const account = { id: 'a', name: 'a', createdAt: 0, discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} }
  await store.accounts.create(account, 10n ** 18n)
  const key = { hash: 'bench-key', limit: 10n ** 17n, limitReset: null }
  if (withKey)
    await store.accounts.addKey({ id: 'k', accountId: 'a', hash: key.hash, prefix: '', createdAt: 0 })
  const hold = async (id: string) =>
    withKey
      ? (await store.ledger.reserveForKey('a', id, 1000n, now, 600_000, key)).reservation
      : await store.ledger.reserve('a', id, 1000n, now, 600_000)
  const now = Date.now()
  let open = 0
  for (const count of counts) {
    for (; open < count; open += 100) {
      await Promise.all(
        Array.from({ length: 100 }, (_, j) =>
          store.ledger.reserve('a', `open-${open + j}`, 1000n, now, 600_000),
        ),
      )
    }
    const start = performance.now()
    for (let i = 0; i < ops; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, async (_, j) => {
          const r = await hold(`x-${count}-${i + j}`)
          if (r) await store.ledger.release(r)
        }),
      )
    }
    const us = ((performance.now() - start) * 1000) / ops
    console.log(`${String(open).padStart(6)} open holds: ${us.toFixed(1)} µs a hold and its release (wall)`)
  }
} finally {
  await store.close()
  await rm(dir, { recursive: true, force: true })
  await database?.drop()
}

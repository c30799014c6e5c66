import { randomUUID } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import pg from 'pg'
import { createPostgresStore } from '../src/store/postgres/index.ts'
import { benchRecord } from './bench-account.ts'
import { createThrowawayDatabase } from './throwaway-database.ts'

// Rough throughput of the PostgreSQL store's hot path: reserve + settle (one request's metering),
// sequential and with concurrent callers, then a request's store calls as the gateway makes them (key
// lookup, check before the body, hold, settle; without and with rate limits) over one and two stores,
// with and without group commit, on a throwaway database. Records figures, asserts nothing.
// BENCH_PRE=0 leaves out the check before the body, as for a body that came with its headers.
// `npm run bench:postgres`; BENCH_PG_URL overrides the admin URL, BENCH_OPS the count (2000).

const ops = Number(process.env['BENCH_OPS'] ?? 2000)
// BENCH_PRE=0: requests whose body came with their headers (no check before the body).
const pre = process.env['BENCH_PRE'] !== '0'

const database = await createThrowawayDatabase()
const url = new URL(database.url)
const store = await createPostgresStore(url.toString(), { poolSize: 10 })

const record = (accountId: string) => benchRecord(`gen-${randomUUID()}`, accountId, 0, 1000n)

async function run(label: string, concurrency: number, accounts: number): Promise<void> {
  const ids = Array.from({ length: accounts }, () => `acct-${randomUUID()}`)
  for (const id of ids) {
    await store.accounts.create(
      { id, name: id, createdAt: 0, discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} },
      10n ** 18n,
    )
  }
  let next = 0
  const worker = async () => {
    while (next < ops) {
      const i = next++
      const accountId = ids[i % ids.length]!
      const r = await store.ledger.reserve(accountId, `r${i}`, 1_000_000n, 0, 60_000)
      if (!r) throw new Error('reserve refused')
      await store.ledger.settle(r, record(accountId))
    }
  }
  const start = performance.now()
  await Promise.all(Array.from({ length: concurrency }, worker))
  const s = (performance.now() - start) / 1000
  console.log(`${label}: ${ops} reserve+settle in ${s.toFixed(2)} s = ${Math.round(ops / s)} ops/s`)
}

async function runConsume(label: string, concurrency: number): Promise<void> {
  const keys = Array.from({ length: concurrency }, () => `rpm-${randomUUID()}`)
  let next = 0
  const worker = async (w: number) => {
    while (next < ops) {
      next++
      await store.rateLimits.consume([{ key: keys[w]!, amount: 1, limit: 1e9 }], 60_000, 0)
    }
  }
  const start = performance.now()
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)))
  const s = (performance.now() - start) / 1000
  console.log(`${label}: ${ops} rate-limit consumes in ${s.toFixed(2)} s = ${Math.round(ops / s)} ops/s`)
}

/**
 * One request's store calls as the gateway makes them (the key lookup, the check before the body, the
 * hold, the settle; with `limits` the account has requests and tokens limits, checked in the first two
 * steps; with `keyLimit` the key has a spending limit, checked with the hold, and charged by the settle), `concurrency` callers per store on one hot account, over `instances` stores (one pool each, as
 * separate gateway processes have), with group commit on or off: requests/s, the database statements a
 * request and the sessions waiting for a row lock, which must not grow with the instance count.
 */
async function runRequests(
  label: string,
  concurrency: number,
  instances: number,
  batch: boolean,
  limits = false,
  keyLimit = false,
) {
  let trips = 0
  const stores = await Promise.all(
    Array.from({ length: instances }, () =>
      createPostgresStore(url.toString(), {
        poolSize: 10,
        ...(batch ? {} : { batch: false as const }),
        onRoundTrip: () => trips++,
      }),
    ),
  )
  const accountId = `acct-${randomUUID()}`
  await stores[0]!.accounts.create(
    { id: accountId, name: accountId, createdAt: 0, discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} },
    10n ** 18n,
  )
  const keyHash = `hash-${randomUUID()}`
  await stores[0]!.accounts.addKey({
    id: keyHash,
    accountId,
    hash: keyHash,
    prefix: 'sk-',
    createdAt: 0,
    ...(keyLimit ? { limit: 10n ** 17n, limitReset: 'monthly' as const } : {}),
  })
  const rpm = [{ key: `rpm-${randomUUID()}`, amount: 1, limit: 1e9 }]
  const tpm = [{ key: `tpm-${randomUUID()}`, amount: 100, limit: 1e12 }]
  trips = 0
  let next = 0
  const worker = async (w: number) => {
    const s = stores[w % instances]!
    while (next < ops) {
      const i = next++
      const found = await s.accounts.findKey(keyHash)
      if (!found) throw new Error('key not found')
      const key =
        found.key.limit == null
          ? undefined
          : { hash: keyHash, limit: found.key.limit, limitReset: 'monthly' as const }
      // A body that came with its headers: no call before it, its hold counts the request.
      if (pre) await s.admission.beforeBody(accountId, limits ? rpm : [], 60_000, 0, true)
      const { reservation } = await s.admission.reserve(
        limits ? (pre ? tpm : [...rpm, ...tpm]) : [],
        60_000,
        accountId,
        `q${i}`,
        1_000_000n,
        0,
        60_000,
        key,
      )
      if (!reservation) throw new Error('reserve refused')
      // With rate limits the tokens window is corrected at the end, with the settle (as the gateway does).
      await Promise.all([
        s.ledger.settle(reservation, { ...record(accountId), keyHash }, { held: reservation.amount, now: 0 }),
        limits ? s.rateLimits.adjust(tpm[0]!.key, -50, 60_000, 0) : undefined,
      ])
    }
  }
  // Row-lock waits: how many of the database's sessions wait for a lock, sampled every 5 ms.
  const sampler = new pg.Client(url.toString())
  await sampler.connect()
  let sampling = true
  let samples = 0
  let waiting = 0
  const sample = async () => {
    while (sampling) {
      const { rows } = await sampler.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'`,
      )
      samples++
      waiting += rows[0]!.n
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
  }
  const sampled = sample()
  const start = performance.now()
  await Promise.all(Array.from({ length: concurrency * instances }, (_, w) => worker(w)))
  const sec = (performance.now() - start) / 1000
  sampling = false
  await sampled
  await sampler.end()
  console.log(
    `${label}: ${Math.round(ops / sec)} requests/s, ${(trips / ops).toFixed(2)} statements a request, ` +
      `${(waiting / Math.max(samples, 1)).toFixed(2)} sessions waiting for a lock on average`,
  )
  await Promise.all(stores.map((st) => st.close()))
}

try {
  await runConsume('sequential', 1)
  await runConsume('16 concurrent, 16 keys', 16)
  await run('sequential, one account', 1, 1)
  await run('16 concurrent, one account', 16, 1)
  await run('16 concurrent, 16 accounts', 16, 16)
  for (const batch of [false, true]) {
    for (const limits of [false, true]) {
      for (const instances of [1, 2]) {
        const mode = batch ? 'group commit' : 'one call a statement'
        await runRequests(
          `requests (key, ${pre ? 'before body, ' : ''}hold, settle${limits ? '; rate limits' : ''}), one account, ${instances} store(s) × 50 callers, ${mode}`,
          50,
          instances,
          batch,
          limits,
        )
      }
    }
  }
  for (const instances of [1, 2]) {
    await runRequests(
      `requests (key with a spending limit, ${pre ? 'before body, ' : ''}hold, settle), one account, ${instances} store(s) × 50 callers, group commit`,
      50,
      instances,
      true,
      false,
      true,
    )
  }
} finally {
  await store.close()
  await database.drop()
}

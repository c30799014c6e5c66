import { randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import pg from 'pg'
import { describe, expect, it, onTestFinished } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import { createLogger } from '../../../src/logger.ts'
import { migrations } from '../../../src/store/postgres/migrations.ts'
import { createMemoryRateLimitStore, createMemoryStore } from '../../../src/store/memory/index.ts'
import { createPostgresStore } from '../../../src/store/postgres/index.ts'
import { redactUrl } from '../../../src/store/database-url.ts'
import type { AdmitOutcome, Store } from '../../../src/store/types.ts'
import { flattenChecks, toDecisions, type ConsumeRow } from '../../../src/store/postgres/rate-limits.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import { createTestDatabase, useTestDatabase } from '../../support/postgres.ts'
import { seeded } from '../../support/seeded.ts'

// Two stores (two pools, as two gateway processes would have) on one database behave as one store.

const MINUTE = 60_000
const uid = (prefix: string) => `${prefix}-${randomUUID()}`

const database = useTestDatabase()

/** A logger whose JSON lines land in `lines`. */
function captureLog(level = 'debug') {
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n'))
        if (l) lines.push(JSON.parse(l) as Record<string, unknown>)
      done()
    },
  })
  return { lines, log: createLogger(level, sink) }
}

async function open(): Promise<Store> {
  const store = await createPostgresStore((await database()).url, {})
  onTestFinished(() => store.close())
  return store
}

describe('postgres: two stores on one database', () => {
  it('a key created through one is found through the other at once', async () => {
    const [a, b] = [await open(), await open()]
    const id = uid('acct')
    await a.accounts.create(accountFixture(id), usd(1))
    const key = { id: uid('key'), accountId: id, hash: uid('hash'), prefix: 'sk-x', createdAt: 1 }
    await a.accounts.addKey(key)
    expect((await b.accounts.findByKeyHash(key.hash))?.id).toBe(id)
    expect(await b.accounts.removeKey(id, key.id)).toBe(true)
    expect(await a.accounts.findByKeyHash(key.hash)).toBeNull()
  })

  it('60 concurrent reserves spread over both admit exactly what the credits cover', async () => {
    const [a, b] = [await open(), await open()]
    const each = usd('0.25')
    const id = uid('acct')
    // Credits for 40: more than one store's 30 (one batch each), so whichever commits first, the other
    // admits some too.
    await a.accounts.create(accountFixture(id), each * 40n)
    const results = await Promise.all(
      Array.from({ length: 60 }, (_, i) => (i % 2 ? a : b).ledger.reserve(id, `g${i}`, each, 0, MINUTE)),
    )
    const admitted = results.filter((r) => r !== null)
    expect(admitted).toHaveLength(40)
    expect(admitted.every((r) => r.amount === each)).toBe(true)
    // Both processes admitted some: the race really was across the two pools.
    expect(new Set(admitted.map((r) => Number(r.id.slice(1)) % 2)).size).toBe(2)
    expect((await b.ledger.credits(id, 0)).reserved).toBe(each * 40n)
  })

  it('a 3-per-minute limit gives exactly 3 across both', async () => {
    const [a, b] = [await open(), await open()]
    const key = uid('rpm')
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 ? a : b).rateLimits.consume([{ key, amount: 1, limit: 3 }], MINUTE, 1000),
      ),
    )
    expect(results.filter((r) => r.allowed)).toHaveLength(3)
    expect((await a.rateLimits.consume([{ key, amount: 1, limit: 3 }], MINUTE, 2000)).allowed).toBe(false)
  })

  it('a record settled through one is read, and charged, through the other', async () => {
    const [a, b] = [await open(), await open()]
    const id = uid('acct')
    await a.accounts.create(accountFixture(id), usd(1))
    const r = (await a.ledger.reserve(id, 'g1', usd('0.5'), 0, MINUTE))!
    const record = generationFixture(uid('gen'), id, { cost: usd('0.2') })
    // The same generation settled through both at once is charged once.
    const settled = await Promise.all([a.ledger.settle(r, record), b.ledger.settle(r, record)])
    expect(settled.filter(Boolean)).toHaveLength(1)
    expect(await b.generations.get(record.generationId)).toEqual(record)
    expect((await b.generations.listByAccount(id, { limit: 10 })).data).toEqual([record])
    expect(await b.ledger.credits(id, 0)).toEqual({
      totalCredits: usd(1),
      totalUsage: usd('0.2'),
      reserved: 0n,
    })
  })

  it('migrations started by two stores at once are applied once', async () => {
    const fresh = await createTestDatabase()
    onTestFinished(() => fresh.drop())
    const [one, two] = [captureLog('info'), captureLog('info')]
    const stores = await Promise.all([
      createPostgresStore(fresh.url, { log: one.log }),
      createPostgresStore(fresh.url, { log: two.log }),
    ])
    onTestFinished(async () => {
      await Promise.all(stores.map((s) => s.close()))
    })
    const applied = [...one.lines, ...two.lines]
      .filter((l) => l['msg'] === 'postgres store ready')
      .flatMap((l) => l['applied'] as number[])
    expect(applied.sort((x, y) => x - y)).toEqual(migrations.map((m) => m.version))

    const client = new pg.Client(fresh.url)
    await client.connect()
    onTestFinished(() => client.end())
    const { rows } = await client.query<{ version: number }>(
      'SELECT version FROM schema_version ORDER BY version',
    )
    expect(rows.map((r) => r.version)).toEqual(migrations.map((m) => m.version))
    // A third start applies nothing and both stores work.
    const third = captureLog('info')
    const store = await createPostgresStore(fresh.url, { log: third.log })
    await store.close()
    expect(third.lines.find((l) => l['msg'] === 'postgres store ready')?.['applied']).toEqual([])
    await Promise.all(stores.map((s) => s.ping()))
  })

  it('unknown accounts are refused as in memory: settle and addKey throw, reserve is null', async () => {
    const store = await open()
    const id = uid('missing')
    await expect(
      store.ledger.settle({ id: 'g', accountId: id }, generationFixture(uid('gen'), id)),
    ).rejects.toThrow(/unknown account/)
    await expect(
      store.accounts.addKey({ id: 'k', accountId: id, hash: uid('h'), prefix: 'p', createdAt: 0 }),
    ).rejects.toThrow(/unknown account/)
    await expect(store.ledger.addCredits(id, 1n, 0)).rejects.toThrow(/unknown account/)
    expect(await store.ledger.reserve(id, 'g', 1n, 0, 1000)).toBeNull()
  })

  it('never logs the password of the database URL', async () => {
    const { lines, log } = captureLog('debug')
    const url = new URL((await database()).url)
    url.password = 'hunter2-secret'
    // Trust authentication on the test server: the password is never asked for, the store opens.
    const store = await createPostgresStore(url.toString(), { log })
    await store.close()
    expect(lines.length).toBeGreaterThan(0)
    expect(JSON.stringify(lines)).not.toContain('hunter2-secret')
    expect(redactUrl(url.toString())).not.toContain('hunter2-secret')
  })
})

describe('postgres: held totals', () => {
  it("keeps each key's held total equal to its holds' sum through every way a hold comes and goes, over two stores", async () => {
    const [a, b] = [await open(), await open()]
    const client = new pg.Client((await database()).url)
    await client.connect()
    onTestFinished(() => client.end())
    const id = uid('acct')
    await a.accounts.create(accountFixture(id), usd(5))
    const hash = uid('hash')
    await a.accounts.addKey({ id: uid('key'), accountId: id, hash, prefix: 'sk-x', createdAt: 1 })
    /** The key's kept total, and its holds (all, and open at `now`) summed from the rows. */
    const sums = async (now: number) => {
      const { rows } = await client.query<{ kept: string | null; all: string; open: string }>(
        `SELECT (SELECT held FROM key_held WHERE key_hash = $1) AS kept,
           (SELECT coalesce(sum(amount), 0) FROM reservations WHERE key_hash = $1) AS all,
           (SELECT coalesce(sum(amount), 0) FROM reservations WHERE key_hash = $1 AND expires_at > $2) AS open`,
        [hash, now],
      )
      return { kept: BigInt(rows[0]!.kept ?? 0), all: BigInt(rows[0]!.all), open: BigInt(rows[0]!.open) }
    }
    const next = seeded(11)
    const holds: { accountId: string; id: string }[] = []
    const steps = new Map<string, number>()
    let now = 1_000
    let most = 0n
    for (let step = 0; step < 150; step++) {
      const store = next(2) === 0 ? a : b
      const kinds = [
        'key',
        'key',
        'unlimited',
        'plain',
        'again',
        'release',
        'settle',
        'renew',
        'time',
        'sweep',
      ]
      const kind = kinds[next(kinds.length)]!
      steps.set(kind, (steps.get(kind) ?? 0) + 1)
      const pick = holds.length > 0 ? holds[next(holds.length)]! : undefined
      const upper = BigInt(1 + next(40)) * usd('0.001')
      const ttl = 50 + next(400)
      if (kind === 'key' || kind === 'unlimited') {
        const hold = { hash, limit: kind === 'key' ? usd('0.08') : null, limitReset: null }
        const r = await store.ledger.reserveForKey(id, `k${step}`, upper, now, ttl, hold)
        if (r.reservation) holds.push(r.reservation)
      } else if (kind === 'plain') {
        const r = await store.ledger.reserve(id, `p${step}`, upper, now, ttl)
        if (r) holds.push(r)
      } else if (kind === 'again' && pick) {
        // The same id held again, with the key or without it.
        const hold = { hash, limit: usd('0.08'), limitReset: null }
        if (next(2) === 0) await store.ledger.reserveForKey(id, pick.id, upper, now, ttl, hold)
        else await store.ledger.reserve(id, pick.id, upper, now, ttl)
      } else if (kind === 'release' && pick) {
        await store.ledger.release(pick)
      } else if (kind === 'settle' && pick) {
        await store.ledger.settle(pick, generationFixture(uid('gen'), id, { cost: 1n }))
      } else if (kind === 'renew' && pick) {
        await store.ledger.renew(pick, now, ttl)
      } else if (kind === 'time') {
        now += next(300)
      } else if (kind === 'sweep') {
        await store.sweep(now)
      }
      const s = await sums(now)
      expect(s.kept, `${kind} at step ${step}`).toBe(s.all)
      expect((await b.ledger.keyUsage(id, [hash], now))[0]?.held, `${kind} at step ${step}`).toBe(s.open)
      most = s.all > most ? s.all : most
    }
    expect(most).toBeGreaterThan(usd('0.02'))
    expect([...steps.values()].every((n) => n > 5)).toBe(true)
  })

  it("a key's hold that expired, not swept yet, no longer counts against its limit", async () => {
    const store = await open()
    const id = uid('acct')
    await store.accounts.create(accountFixture(id), usd(5))
    const hash = uid('hash')
    await store.accounts.addKey({ id: uid('key'), accountId: id, hash, prefix: 'sk-x', createdAt: 1 })
    const hold = { hash, limit: usd('0.01'), limitReset: null }
    const first = await store.ledger.reserveForKey(id, 'first', usd('0.006'), 0, 100, hold)
    expect(first.reservation?.amount).toBe(usd('0.006'))
    // Open: what is left of the limit is held.
    expect(
      (await store.ledger.reserveForKey(id, 'open', usd('0.006'), 50, 100, hold)).reservation?.amount,
    ).toBe(usd('0.004'))
    await store.ledger.release({ accountId: id, id: 'open' })
    // Expired at 200 (and still in the table): the whole limit is there again.
    expect(
      (await store.ledger.reserveForKey(id, 'later', usd('0.02'), 200, 100, hold)).reservation?.amount,
    ).toBe(usd('0.01'))
    expect((await store.ledger.keyUsage(id, [hash], 200))[0]?.held).toBe(usd('0.01'))
  })
})

describe('postgres rate limits', () => {
  it('decide exactly as memory over a long random sequence (repeated keys, adjusts, window roll-overs)', async () => {
    const pgStore = await open()
    const memory = createMemoryRateLimitStore()
    const next = seeded(42)
    const keys = [uid('a'), uid('b'), uid('c')]
    let now = 1_000_000
    const outcomes = { allowed: 0, refused: 0 }
    for (let step = 0; step < 300; step++) {
      now += [0, 1, 997, 7_919, 29_999, 61_000, 130_000][next(7)]!
      if (next(5) === 0) {
        const key = keys[next(3)]!
        const delta = next(9) - 4
        await memory.adjust(key, delta, MINUTE, now)
        await pgStore.rateLimits.adjust(key, delta, MINUTE, now)
        continue
      }
      const checks = Array.from({ length: 1 + next(3) }, () => ({
        key: keys[next(3)]!,
        amount: 1 + next(5),
        limit: 3 + next(8),
      }))
      const expected = await memory.consume(checks, MINUTE, now)
      expect(await pgStore.rateLimits.consume(checks, MINUTE, now), `step ${step}`).toEqual(expected)
      outcomes[expected.allowed ? 'allowed' : 'refused']++
    }
    // The sequence exercised both answers.
    expect(outcomes.allowed).toBeGreaterThan(20)
    expect(outcomes.refused).toBeGreaterThan(20)
  })

  it('a batch of calls in one statement decides as memory does them one after another', async () => {
    await open()
    const client = new pg.Client((await database()).url)
    await client.connect()
    onTestFinished(() => client.end())
    const memory = createMemoryRateLimitStore()
    const next = seeded(7)
    const keys = [uid('a'), uid('b'), uid('c')]
    let now = 1_000_000
    const outcomes = { allowed: 0, refused: 0, batches: 0 }
    for (let round = 0; round < 60; round++) {
      // Calls of one batch at nows that may cross into the next window (or skip one), with a key
      // repeated within a call, as junction_consume_many gets them from the event loop.
      const items = Array.from({ length: 1 + next(6) }, () => {
        now += [0, 1, 997, 29_999, 61_000, 130_000][next(6)]!
        const checks = Array.from({ length: 1 + next(3) }, () => ({
          key: keys[next(3)]!,
          amount: 1 + next(5),
          limit: 3 + next(8),
        }))
        return { checks, windowMs: MINUTE, now }
      })
      const expected = []
      for (const item of items) expected.push(await memory.consume(item.checks, MINUTE, item.now))
      const { rows } = await client.query<ConsumeRow & { call: number }>(
        `SELECT call, fits, used FROM junction_consume_many($1::integer[], $2::integer[], $3::bigint[],
           $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])`,
        flattenChecks(items),
      )
      const got = items.map((item, i) =>
        toDecisions(
          item,
          rows.filter((r) => r.call === i + 1),
        ),
      )
      expect(got, `round ${round}`).toEqual(expected)
      for (const e of expected) outcomes[e.allowed ? 'allowed' : 'refused']++
      if (items.length > 1) outcomes.batches++
    }
    expect(outcomes.allowed).toBeGreaterThan(20)
    expect(outcomes.refused).toBeGreaterThan(20)
    expect(outcomes.batches).toBeGreaterThan(30)
    // The windows as they were left: the next check of each key sees what memory's sees.
    for (const key of keys) {
      const item = { checks: [{ key, amount: 0, limit: 100 }], windowMs: MINUTE, now: now + 1 }
      const { rows } = await client.query<ConsumeRow>(
        'SELECT fits, used FROM junction_consume($1::text[], $2::bigint[], $3::bigint[], $4, $5)',
        [[key], [0], [100], MINUTE, now + 1],
      )
      expect(toDecisions(item, rows)).toEqual(await memory.consume(item.checks, MINUTE, now + 1))
    }
  })
})

describe('postgres group commit', () => {
  /** A store whose statements are counted by kind. */
  async function counted(): Promise<{ store: Store; trips: Map<string, number> }> {
    const trips = new Map<string, number>()
    const store = await createPostgresStore((await database()).url, {
      onRoundTrip: (kind) => trips.set(kind, (trips.get(kind) ?? 0) + 1),
    })
    onTestFinished(() => store.close())
    return { store, trips }
  }
  const sum = (trips: Map<string, number>, kinds: string[]) =>
    kinds.reduce((n, k) => n + (trips.get(k) ?? 0), 0)

  it('400 concurrent reserves over two stores, credits for exactly 150: 150 admitted, a few round trips each', async () => {
    const [a, b] = [await counted(), await counted()]
    const each = usd('0.01')
    const id = uid('acct')
    await a.store.accounts.create(accountFixture(id), each * 150n)
    const results = await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        (i % 2 ? a : b).store.ledger.reserve(id, `g${i}`, each, 0, MINUTE),
      ),
    )
    expect(results.filter((r) => r !== null)).toHaveLength(150)
    expect(results.every((r) => r === null || r.amount === each)).toBe(true)
    expect((await a.store.ledger.credits(id, 0)).reserved).toBe(each * 150n)
    // 200 calls per store, all made in one turn: one batch each, not 200 round trips.
    for (const s of [a, b]) expect(sum(s.trips, ['reserve', 'reserve_many'])).toBeLessThanOrEqual(2)
  })

  it('settles in one batch decide as memory does one at a time, charge-ceiling and exactly-once included', async () => {
    const reference = createMemoryStore()
    const { store, trips } = await counted()
    const run = async (s: Store, id: string, concurrent: boolean) => {
      await s.accounts.create(accountFixture(id, { overdraft: usd('0.05') }), usd(1))
      const holds = await Promise.all(
        Array.from({ length: 14 }, (_, i) => s.ledger.reserve(id, `g${i}`, usd('0.1'), 0, MINUTE)),
      )
      // Costs around the holds: within, past the hold, past the overdraft; every other one settled
      // twice (a retry), and the ones refused a hold settled without one.
      const calls = Array.from({ length: 14 }, (_, i) => {
        const record = generationFixture(`${id}-gen${i % 10}`, id, {
          cost: usd(['0.02', '0.1', '0.13', '0.4'][i % 4]!),
        })
        const ref = { id: `g${i}`, accountId: id }
        const held = holds[i]?.amount
        return () => s.ledger.settle(ref, record, { ...(held === undefined ? {} : { held }), now: 1 })
      })
      const charged = concurrent
        ? await Promise.all(calls.map((c) => c()))
        : await calls.reduce<Promise<unknown[]>>(
            async (acc, c) => [...(await acc), await c()],
            Promise.resolve([]),
          )
      return {
        charged: charged.map((r) => (r as { cost: bigint } | null)?.cost ?? null),
        credits: await s.ledger.credits(id, 1),
      }
    }
    const id = uid('acct')
    const expected = await run(reference, id, false)
    const before = trips.get('settle_many') ?? 0
    const got = await run(store, id, true)
    expect(got).toEqual(expected)
    expect(got.charged.filter((c) => c === null)).toHaveLength(4)
    expect((trips.get('settle_many') ?? 0) - before).toBe(1)
    expect(got.credits.totalCredits - got.credits.totalUsage - got.credits.reserved).toBeGreaterThanOrEqual(
      -usd('0.05'),
    )
  })

  it.each([
    ['distinct ids (holds summed once per account and now)', (i: number) => `g${i}`],
    ['an id asked twice (taken one at a time)', (i: number) => `g${i % 25}`],
  ])('reserves in one batch decide as memory does one at a time: %s', async (_, idOf) => {
    const { store, trips } = await counted()
    const reference = createMemoryStore()
    const run = async (s: Store, concurrent: boolean) => {
      const [a, b] = [uid('a'), uid('b')]
      await s.accounts.create(accountFixture(a), usd(1))
      await s.accounts.create(accountFixture(b), usd('0.35'))
      // Holds from before the batch, one of them expiring amid the batch's nows.
      await s.ledger.reserve(a, 'old1', usd('0.2'), 0, 10)
      await s.ledger.reserve(b, 'old2', usd('0.05'), 0, MINUTE)
      const calls = Array.from({ length: 30 }, (_, i) => {
        const account = [a, b, uid('missing')][i % 3]!
        return () => s.ledger.reserve(account, idOf(i), usd(['0.07', '0.15', '0.03'][i % 3]!), i, MINUTE)
      })
      const got = concurrent
        ? await Promise.all(calls.map((c) => c()))
        : await calls.reduce<Promise<unknown[]>>(
            async (acc, c) => [...(await acc), await c()],
            Promise.resolve([]),
          )
      return {
        amounts: got.map((r) => (r as { amount: bigint } | null)?.amount ?? null),
        a: await s.ledger.credits(a, 30),
        b: await s.ledger.credits(b, 30),
      }
    }
    const expected = await run(reference, false)
    const before = trips.get('reserve_many') ?? 0
    expect(await run(store, true)).toEqual(expected)
    expect((trips.get('reserve_many') ?? 0) - before).toBe(1)
  })

  it('a batch with a settle the database refuses (unknown account) fails that one only', async () => {
    const { store } = await counted()
    const id = uid('acct')
    await store.accounts.create(accountFixture(id), usd(1))
    const missing = uid('missing')
    const results = await Promise.allSettled([
      store.ledger.settle({ id: 'a', accountId: id }, generationFixture(uid('gen'), id)),
      store.ledger.settle({ id: 'b', accountId: missing }, generationFixture(uid('gen'), missing)),
      store.ledger.settle({ id: 'c', accountId: id }, generationFixture(uid('gen'), id)),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect(String((results[1] as PromiseRejectedResult).reason)).toMatch(/unknown account/)
    const cost = generationFixture('x', id).cost
    expect((await store.ledger.credits(id, 0)).totalUsage).toBe(cost * 2n)
  })

  it('300 concurrent rate-limit checks over two stores at a limit of 100: exactly 100, in a few round trips', async () => {
    const [a, b] = [await counted(), await counted()]
    const key = uid('rpm')
    const tokens = uid('tpm')
    const results = await Promise.all(
      Array.from({ length: 300 }, (_, i) =>
        (i % 2 ? a : b).store.rateLimits.consume(
          [
            { key, amount: 1, limit: 100 },
            { key: tokens, amount: 10, limit: 100_000 },
          ],
          MINUTE,
          1000 + i,
        ),
      ),
    )
    expect(results.filter((r) => r.allowed)).toHaveLength(100)
    // All or nothing per call: the tokens counted are those of the admitted calls.
    const after = await a.store.rateLimits.consume([{ key: tokens, amount: 0, limit: 100_000 }], MINUTE, 2000)
    expect(after.decisions[0]!.remaining).toBe(100_000 - 100 * 10)
    for (const s of [a, b]) expect(sum(s.trips, ['consume', 'consume_many'])).toBeLessThanOrEqual(2)
  })

  it('key lookups and credit reads of one turn are one statement each', async () => {
    const { store, trips } = await counted()
    const id = uid('acct')
    await store.accounts.create(accountFixture(id), usd(2))
    const key = { id: uid('key'), accountId: id, hash: uid('hash'), prefix: 'sk-x', createdAt: 1 }
    await store.accounts.addKey(key)
    const found = await Promise.all(
      Array.from({ length: 50 }, (_, i) => store.accounts.findByKeyHash(i % 5 ? key.hash : uid('nope'))),
    )
    expect(found.map((f) => f?.id ?? null)).toEqual(Array.from({ length: 50 }, (_, i) => (i % 5 ? id : null)))
    const credits = await Promise.all(
      Array.from({ length: 50 }, (_, i) => store.ledger.credits(i % 5 ? id : uid('nope'), 0)),
    )
    expect(credits.filter((c) => c.totalCredits === usd(2))).toHaveLength(40)
    expect(credits.filter((c) => c.totalCredits === 0n)).toHaveLength(10)
    expect(sum(trips, ['account_by_key', 'accounts_by_keys'])).toBe(1)
    expect(sum(trips, ['credits', 'credits_many'])).toBe(1)
  })

  it('settles all within their holds go as one statement and decide as memory does, repeats included', async () => {
    const reference = createMemoryStore()
    const { store, trips } = await counted()
    const run = async (s: Store, id: string, concurrent: boolean) => {
      await s.accounts.create(accountFixture(id), usd(1))
      const holds = await Promise.all(
        Array.from({ length: 12 }, (_, i) => s.ledger.reserve(id, `g${i}`, usd('0.05'), 0, MINUTE)),
      )
      // Two settled before the batch: the batch repeats them (a retry), and they change nothing.
      const settleOf = (i: number) => () =>
        s.ledger.settle(
          { id: `g${i}`, accountId: id },
          generationFixture(`${id}-gen${i}`, id, { cost: usd(['0.01', '0.05', '0.002'][i % 3]!) }),
          { held: holds[i]!.amount, now: 1 },
        )
      await settleOf(0)()
      await settleOf(1)()
      const calls = Array.from({ length: 12 }, (_, i) => settleOf(i))
      const charged = concurrent
        ? await Promise.all(calls.map((c) => c()))
        : await calls.reduce<Promise<unknown[]>>(
            async (acc, c) => [...(await acc), await c()],
            Promise.resolve([]),
          )
      const records = await s.generations.listByAccount(id, { limit: 100 })
      return {
        charged: charged.map((r) => (r as { cost: bigint } | null)?.cost ?? null),
        credits: await s.ledger.credits(id, 1),
        records: records.data.map((r) => [r.generationId.slice(id.length), r.cost]).sort(),
      }
    }
    const id = uid('acct')
    const expected = await run(reference, id, false)
    const before = trips.get('settle_many') ?? 0
    const got = await run(store, id, true)
    expect(got).toEqual(expected)
    expect(got.charged.slice(0, 2)).toEqual([null, null])
    expect(got.credits.reserved).toBe(0n)
    expect((trips.get('settle_many') ?? 0) - before).toBe(1)
  })

  it('rate-limit corrections made at once are one statement, and leave the windows as memory does', async () => {
    const { store, trips } = await counted()
    const memory = createMemoryRateLimitStore()
    const keys = [uid('tpm'), uid('tpm'), uid('tpm')]
    const run = async (s: Store['rateLimits'], concurrent: boolean) => {
      for (const key of keys) await s.consume([{ key, amount: 500, limit: 10_000 }], MINUTE, 1_000)
      // Repeated keys, corrections below zero (clamped), and nows in the next window (rolled over).
      const calls = Array.from(
        { length: 24 },
        (_, i) => () =>
          s.adjust(keys[i % 3]!, [300, -900, 40, -20][i % 4]!, MINUTE, i < 16 ? 2_000 + i : MINUTE + i),
      )
      if (concurrent) await Promise.all(calls.map((c) => c()))
      else for (const c of calls) await c()
      const after = []
      for (const key of keys)
        after.push((await s.consume([{ key, amount: 0, limit: 10_000 }], MINUTE, MINUTE + 30_000)).decisions)
      return after
    }
    const expected = await run(memory, false)
    trips.clear()
    expect(await run(store.rateLimits, true)).toEqual(expected)
    expect(trips.get('adjust_many')).toBe(1)
    expect(trips.get('adjust')).toBeUndefined()
  })

  it('admission of concurrent requests is one statement per step, as memory decides it', async () => {
    const { store, trips } = await counted()
    const reference = createMemoryStore()
    const run = async (s: Store, concurrent: boolean) => {
      const id = uid('acct')
      await s.accounts.create(accountFixture(id), usd('0.5'))
      const rpm = { key: uid('rpm'), amount: 1, limit: 30 }
      const all = <T>(calls: (() => Promise<T>)[]): Promise<T[]> =>
        concurrent
          ? Promise.all(calls.map((c) => c()))
          : calls.reduce<Promise<T[]>>(async (acc, c) => [...(await acc), await c()], Promise.resolve([]))
      const before = await all(
        Array.from({ length: 40 }, () => () => s.admission.beforeBody(id, [rpm], MINUTE, 5, true)),
      )
      const tpm = uid('tpm')
      const held = await all(
        Array.from(
          { length: 40 },
          (_, i) => () =>
            s.admission.reserve(
              [{ key: tpm, amount: 100, limit: 3_000 }],
              MINUTE,
              id,
              `g${i}`,
              usd('0.02'),
              5,
              MINUTE,
            ),
        ),
      )
      return {
        before: before.map((b) => [b.allowed, b.hasCredits, b.decisions[0]!.remaining]),
        held: held.map((h) => [h.allowed, h.reservation?.amount ?? null, h.decisions[0]!.remaining]),
      }
    }
    const expected = await run(reference, false)
    trips.clear()
    const got = await run(store, true)
    expect(got).toEqual(expected)
    // 30 of 40 within the requests limit; 30 within the tokens limit, of which 25 find credits.
    expect(got.before.filter(([allowed]) => allowed)).toHaveLength(30)
    expect(got.held.filter(([, amount]) => amount !== null)).toHaveLength(25)
    expect(trips.get('before_body_many')).toBe(1)
    expect(trips.get('admit_many')).toBe(1)
  })

  it.each([
    ['with rate checks', true],
    ['without rate checks', false],
  ])(
    'keyed holds of concurrent requests are one statement, each key’s limit taken as memory takes it (%s)',
    async (_, checked) => {
      const { store, trips } = await counted()
      const reference = createMemoryStore()
      const T0 = 1_700_000_000_000
      const run = async (s: Store, concurrent: boolean) => {
        const id = uid('acct')
        await s.accounts.create(accountFixture(id), usd('0.35'))
        const limited = { hash: uid('k1'), limit: usd('0.1'), limitReset: 'daily' as const }
        const total = { hash: uid('k2'), limit: usd('0.05'), limitReset: null }
        const unlimited = { hash: uid('k3'), limit: null, limitReset: null }
        // The limited key spent 0.03 already, and holds 0.02 for a request in flight.
        await s.ledger.reserveForKey(id, 'pre', usd('0.05'), T0, MINUTE, limited)
        await s.ledger.settle(
          { id: 'pre', accountId: id },
          generationFixture(uid('gen'), id, { cost: usd('0.03'), keyHash: limited.hash, createdAt: T0 }),
          { held: usd('0.05'), now: T0 },
        )
        await s.ledger.reserveForKey(id, 'flight', usd('0.02'), T0, MINUTE, limited)
        const keys = [limited, total, unlimited, undefined]
        const calls = Array.from(
          { length: 32 },
          (_, i) => () =>
            s.admission.reserve(
              checked ? [{ key: `${id}-rpm`, amount: 1, limit: 1_000 }] : [],
              MINUTE,
              id,
              `g${i}`,
              usd(['0.015', '0.02', '0.03', '0.01'][i % 4]!),
              T0 + 1,
              MINUTE,
              keys[i % 4],
            ),
        )
        const held = concurrent
          ? await Promise.all(calls.map((c) => c()))
          : await calls.reduce<Promise<AdmitOutcome[]>>(
              async (acc, c) => [...(await acc), await c()],
              Promise.resolve([]),
            )
        const usage = await s.ledger.keyUsage(id, [limited.hash, total.hash, unlimited.hash], T0 + 1)
        return {
          held: held.map((h) => [h.allowed, h.reservation?.amount ?? null, h.keyLimited ?? null]),
          credits: await s.ledger.credits(id, T0 + 1),
          usage,
        }
      }
      const expected = await run(reference, false)
      const got = await run(store, true)
      expect(got).toEqual(expected)
      // The limited key: 0.1 − 0.03 spent − 0.02 held leaves 0.05 (0.015 × 3 and a last 0.005), then
      // nothing; the other limited one 0.05 (0.02 × 2 and 0.01); the rest until the credits run out.
      expect(got.usage[0]!.held).toBe(usd('0.07'))
      expect(got.usage[1]!.held).toBe(usd('0.05'))
      expect(got.held.filter(([, , limitedBy]) => limitedBy === true).length).toBeGreaterThan(0)
      expect(got.held.filter(([, amount]) => amount === null).length).toBeGreaterThan(
        got.held.filter(([, , limitedBy]) => limitedBy === true).length,
      )
      // The 32 holds in one statement (junction_reserve_many with the keys), none one by one.
      expect(trips.get('admit_many')).toBe(1)
      expect(trips.get('admit_one')).toBeUndefined()
    },
  )

  it('settles in one batch charge each record’s key once, in the settle’s statement, as memory does', async () => {
    const { store, trips } = await counted()
    const reference = createMemoryStore()
    const T0 = 1_700_000_000_000
    const run = async (s: Store, concurrent: boolean) => {
      const id = uid('acct')
      await s.accounts.create(accountFixture(id), usd(1))
      const keys = [uid('k1'), uid('k2')]
      const holds = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          s.ledger.reserveForKey(id, `g${i}`, usd('0.05'), T0, MINUTE, {
            hash: keys[i % 2]!,
            limit: null,
            limitReset: null,
          }),
        ),
      )
      // Within their holds but one (capped to its hold by the ceiling), every third naming no key (its hold's
      // is taken), and generation ids 0 to 3 settled twice.
      const calls = Array.from({ length: 16 }, (_, i) => () => {
        const n = i < 12 ? i : i - 12
        return s.ledger.settle(
          { id: `g${n}`, accountId: id },
          generationFixture(`${id}-gen${n}`, id, {
            cost: usd(n === 5 ? '0.08' : '0.01'),
            createdAt: T0,
            ...(n % 3 ? { keyHash: keys[n % 2]! } : {}),
          }),
          { held: holds[n]!.reservation!.amount, now: T0 },
        )
      })
      const charged = concurrent
        ? await Promise.all(calls.map((c) => c()))
        : await calls.reduce<Promise<unknown[]>>(
            async (acc, c) => [...(await acc), await c()],
            Promise.resolve([]),
          )
      const records = await s.generations.listByAccount(id, { limit: 100 })
      return {
        charged: charged.map((r) => (r as { cost: bigint } | null)?.cost ?? null),
        usage: (await s.ledger.keyUsage(id, keys, T0)).map((u) => [u.total, u.daily, u.held]),
        records: records.data
          .map((r) => [
            r.generationId.slice(id.length),
            r.keyHash === keys[0] ? 0 : r.keyHash === keys[1] ? 1 : null,
          ])
          .sort(),
      }
    }
    const expected = await run(reference, false)
    const before = sum(trips, ['settle', 'settle_many'])
    const got = await run(store, true)
    expect(got).toEqual(expected)
    expect(got.charged.slice(12)).toEqual([null, null, null, null])
    expect(got.usage.map(([totalSpent]) => totalSpent)).toEqual([usd('0.06'), usd('0.1')])
    expect(got.records.every(([, key]) => key !== null)).toBe(true)
    expect(sum(trips, ['settle', 'settle_many']) - before).toBeLessThanOrEqual(2)
  })

  it('a key’s limit is not overdrawn by concurrent keyed holds spread over two stores', async () => {
    const [a, b] = [await counted(), await counted()]
    const id = uid('acct')
    await a.store.accounts.create(accountFixture(id), usd(10))
    const key = { hash: uid('key'), limit: usd('0.3'), limitReset: 'monthly' as const }
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        (i % 2 ? a : b).store.admission.reserve([], MINUTE, id, `r${i}`, usd('0.01'), 5, MINUTE, key),
      ),
    )
    expect(results.filter((r) => r.reservation !== null)).toHaveLength(30)
    expect(results.filter((r) => r.keyLimited === true)).toHaveLength(170)
    expect((await a.store.ledger.keyUsage(id, [key.hash], 5))[0]!.held).toBe(usd('0.3'))
  })
})

describe('postgres check before the body', () => {
  it('an account seen with credits is not asked again at once; what this instance sees emptying it is', async () => {
    let trips = 0
    // (Known for a minute here, so that no slowness of the machine makes it ask again.)
    const a = await createPostgresStore((await database()).url, {
      onRoundTrip: () => trips++,
      creditsKnownMs: MINUTE,
    })
    onTestFinished(() => a.close())
    const b = await open()
    const id = uid('acct')
    await a.accounts.create(accountFixture(id), usd(1))
    expect((await a.admission.beforeBody(id, [], MINUTE, 0, true)).hasCredits).toBe(true)
    const before = trips
    expect((await a.admission.beforeBody(id, [], MINUTE, 1, true)).hasCredits).toBe(true)
    expect(trips).toBe(before)

    // Another instance holds everything: this one may still let a body in for a moment, and then the
    // hold refuses it, exactly.
    expect(await b.ledger.reserve(id, 'all', usd(1), 1, MINUTE)).not.toBeNull()
    const refused = await a.admission.reserve([], MINUTE, id, 'late', usd('0.1'), 2, MINUTE)
    expect(refused.reservation).toBeNull()
    // The refusal is seen here: the next check asks the database, and finds nothing left.
    expect((await a.admission.beforeBody(id, [], MINUTE, 3, true)).hasCredits).toBe(false)
    expect(trips).toBe(before + 2)
    // With rate checks the database is always asked (the limits are counted there).
    await b.ledger.release({ id: 'all', accountId: id })
    const limited = await a.admission.beforeBody(
      id,
      [{ key: uid('rpm'), amount: 1, limit: 5 }],
      MINUTE,
      4,
      true,
    )
    expect(limited).toMatchObject({ allowed: true, hasCredits: true })
    expect(trips).toBe(before + 3)
  })
})

describe('postgres key lookups', () => {
  /** A store counting its statements, and the notifications it heard (the first: it listens). */
  async function listening() {
    let trips = 0
    let heard: () => void = () => {}
    let next = new Promise<void>((resolve) => (heard = resolve))
    const store = await createPostgresStore((await database()).url, {
      onRoundTrip: () => trips++,
      onAccountsChanged: () => {
        heard()
        next = new Promise<void>((resolve) => (heard = resolve))
      },
    })
    onTestFinished(() => store.close())
    await next
    return { store, trips: () => trips, changed: () => next }
  }

  it('are answered from memory, and a key revoked or an account changed by another instance is seen at once', async () => {
    const a = await listening()
    const b = await listening()
    const id = uid('acct')
    await b.store.accounts.create(accountFixture(id), usd(1))
    const key = { id: uid('key'), accountId: id, hash: uid('hash'), prefix: 'sk-x', createdAt: 1 }
    // (Adding a key notifies too: an upsert fires the update trigger.)
    const added = a.changed()
    await b.store.accounts.addKey(key)
    await added
    const first = await a.store.accounts.findByKeyHash(key.hash)
    expect(first?.id).toBe(id)
    const before = a.trips()
    expect(await a.store.accounts.findByKeyHash(key.hash)).toEqual(first)
    expect(a.trips()).toBe(before)

    // Another instance changes the account's limits, then revokes the key: this one is told each time.
    const told = a.changed()
    await b.store.accounts.update(id, { rateLimits: { requestsPerMinute: 7 } })
    await told
    expect((await a.store.accounts.findByKeyHash(key.hash))?.rateLimits).toEqual({ requestsPerMinute: 7 })
    // And the key's own settings (its limit, disabled): the cached lookup carries the key too.
    expect((await a.store.accounts.findKey(key.hash))?.key.disabled).toBeUndefined()
    const keyChanged = a.changed()
    await b.store.accounts.updateKey(id, key.hash, { disabled: true, limit: usd(2) })
    await keyChanged
    expect((await a.store.accounts.findKey(key.hash))?.key).toMatchObject({ disabled: true, limit: usd(2) })
    const revoked = a.changed()
    expect(await b.store.accounts.removeKey(id, key.id)).toBe(true)
    await revoked
    expect(await a.store.accounts.findByKeyHash(key.hash)).toBeNull()
  })

  it('an instance’s own change is seen by its next lookup, before any notification', async () => {
    const a = await listening()
    const id = uid('acct')
    await a.store.accounts.create(accountFixture(id), usd(1))
    const key = { id: uid('key'), accountId: id, hash: uid('hash'), prefix: 'sk-x', createdAt: 1 }
    await a.store.accounts.addKey(key)
    expect((await a.store.accounts.findByKeyHash(key.hash))?.id).toBe(id)
    await a.store.accounts.updateKey(id, key.hash, { allowedModels: ['openai/*'] })
    expect((await a.store.accounts.findKey(key.hash))?.key.allowedModels).toEqual(['openai/*'])
    await a.store.accounts.update(id, { notices: { url: null, balanceLow: usd(1) } })
    expect((await a.store.accounts.findKey(key.hash))?.account.notices).toEqual({
      url: null,
      balanceLow: usd(1),
    })
    await a.store.accounts.removeKey(id, key.id)
    expect(await a.store.accounts.findByKeyHash(key.hash)).toBeNull()
  })
})

describe('postgres holds total', () => {
  it('follows renewals, releases, a hold taken again under its id, and the sweep', async () => {
    const store = await open()
    const id = uid('acct')
    await store.accounts.create(accountFixture(id), usd(1))
    await store.ledger.reserve(id, 'a', usd('0.1'), 0, MINUTE)
    await store.ledger.reserve(id, 'b', usd('0.2'), 0, 10)
    await store.ledger.reserve(id, 'c', usd('0.3'), 0, MINUTE)
    // The same id again replaces its hold.
    await store.ledger.reserve(id, 'c', usd('0.05'), 1, MINUTE)
    expect(await store.ledger.renew({ id, accountId: id }, 5, MINUTE)).toBe(false)
    expect(await store.ledger.renew({ id: 'a', accountId: id }, 5, 2 * MINUTE)).toBe(true)
    await store.ledger.release({ id: 'a', accountId: id })
    // b expired at 10: not counted, then swept.
    expect((await store.ledger.credits(id, 20)).reserved).toBe(usd('0.05'))
    await store.sweep(20)
    expect((await store.ledger.credits(id, 0)).reserved).toBe(usd('0.05'))
  })

  it('every ledger row’s total of holds equals the sum of its reservations, after every test above', async () => {
    // The tests of this file ran reserves (batched, repeated ids, expiring), renewals, releases, sweeps
    // and settles (batched, one by one, past their holds, repeated) on this database: the triggers
    // kept each total exact.
    const client = new pg.Client((await database()).url)
    await client.connect()
    onTestFinished(() => client.end())
    const { rows } = await client.query<{ accounts: number; wrong: number; held: string }>(
      `SELECT count(*)::int AS accounts, coalesce(sum(l.held), 0)::text AS held,
         count(*) FILTER (WHERE l.held <> (SELECT coalesce(sum(r.amount), 0) FROM reservations r
           WHERE r.account_id = l.account_id))::int AS wrong
       FROM ledger l`,
    )
    expect(rows[0]!.accounts).toBeGreaterThan(10)
    expect(BigInt(rows[0]!.held)).toBeGreaterThan(0n)
    expect(rows[0]!.wrong).toBe(0)
  })
})

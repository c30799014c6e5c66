import { randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import pg from 'pg'
import { describe, expect, it, onTestFinished } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import { createLogger } from '../../../src/logger.ts'
import { migrations } from '../../../src/store/postgres-migrations.ts'
import { createMemoryRateLimitStore } from '../../../src/store/memory.ts'
import { createPostgresStore, redactUrl } from '../../../src/store/postgres.ts'
import type { Store } from '../../../src/store/types.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import { createTestDatabase, useTestDatabase } from '../../support/postgres.ts'

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

describe('postgres rate limits', () => {
  it('decide exactly as memory over a long random sequence (repeated keys, adjusts, window roll-overs)', async () => {
    const pgStore = await open()
    const memory = createMemoryRateLimitStore()
    // A fixed-seed generator: the same sequence every run.
    let seed = 42
    const next = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31
      return seed % n
    }
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
})

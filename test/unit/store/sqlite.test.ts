import { copyFileSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { Worker } from 'node:worker_threads'
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import { GatewayError } from '../../../src/errors.ts'
import type { CheckpointReport } from '../../../src/store/sqlite/checkpointer.ts'
import { createSqliteStore, type SqliteStoreOptions } from '../../../src/store/sqlite/index.ts'
import { sqliteMigrations } from '../../../src/store/sqlite/migrations.ts'
import type { Store } from '../../../src/store/types.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import { seeded } from '../../support/seeded.ts'

// What only the SQLite backend does (the interface itself: sqlite.contract.test.ts): state on disk
// across reopening, migrations, several connections on one file, failures as store_unavailable.

const dir = mkdtempSync(join(tmpdir(), 'junction-sqlite-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0
const freshPath = (): string => join(dir, `s${++n}`, 'junction.db')

const open = (path: string, options?: SqliteStoreOptions): Store => {
  const store = createSqliteStore(path, options)
  onTestFinished(() => store.close())
  return store
}

/** The accounts a copy of the database file alone (no WAL) holds. */
function accountsInFile(path: string): string[] {
  const copy = `${path}.copy`
  copyFileSync(path, copy)
  const db = new DatabaseSync(copy, { readOnly: true })
  try {
    // Before any checkpoint even the tables exist only in the WAL.
    if (!db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'accounts'").get()) return []
    return (db.prepare('SELECT id FROM accounts').all() as { id: string }[]).map((r) => r.id)
  } finally {
    db.close()
  }
}

describe('SQLite store', () => {
  it('checkpoints the WAL from a worker thread, started by the third batch: the database file alone then holds the commits', async () => {
    // Done at the first complete checkpoint whose file holds the commits. It may come before the
    // create's answer reaches this test (the thread reports only a change, so nothing follows it): each
    // complete one is checked against the file itself, not counted from the moment the create returned.
    let reportDone: (r: CheckpointReport) => void = () => undefined
    const done = new Promise<CheckpointReport>((resolve) => (reportDone = resolve))
    const withThread = freshPath()
    let starts = 0
    let reports = 0
    const store = open(withThread, {
      checkpointIntervalMs: 5,
      checkpointerStartBatches: 3,
      onCheckpointerStart: () => starts++,
      onCheckpoint: (r) => {
        reports++
        if (r.busy !== 0 || r.checkpointed !== r.log) return
        if (accountsInFile(withThread).length === 3) reportDone(r)
      },
    })
    // One call awaited at a time is a batch each: the thread starts as the third is answered.
    await store.accounts.create(accountFixture('a1'), usd(3))
    await store.accounts.create(accountFixture('a2'), usd(3))
    expect({ starts, reports }).toEqual({ starts: 0, reports: 0 })
    await store.accounts.create(accountFixture('a3'), usd(3))
    expect(starts).toBe(1)
    await done
    expect(accountsInFile(withThread).sort()).toEqual(['a1', 'a2', 'a3'])
    await store.accounts.create(accountFixture('a4'), usd(3))
    expect(starts).toBe(1)

    // Without the thread the same commit stays in the WAL: SQLite's own checkpoint waits for 1000 pages.
    const without = freshPath()
    const inline = open(without, { checkpointIntervalMs: 0 })
    await inline.accounts.create(accountFixture('acct'), usd(3))
    expect(accountsInFile(without)).toEqual([])
  })

  it('a checkpoint thread that keeps failing is reported and restarted with a doubling backoff', async () => {
    const delays: number[] = []
    let restarts = 0
    const store = await new Promise<Store>((resolve) => {
      const s = open(freshPath(), {
        checkpointerScript: new URL('../../support/failing-checkpointer.ts', import.meta.url),
        checkpointerStartBatches: 0,
        checkpointerRestartMs: 5,
        onCheckpointerError: (err, restartInMs) => {
          expect(err).toMatchObject({ message: 'the checkpointer broke' })
          delays.push(restartInMs)
          if (delays.length === 4) resolve(s)
        },
        onCheckpointerRestart: () => restarts++,
      })
    })
    expect(delays).toEqual([5, 10, 20, 40])
    expect(restarts).toBe(3)
    // Meanwhile the store works (checkpoints happen inside its commits).
    await store.accounts.create(accountFixture('acct'), usd(3))
    expect((await store.accounts.get('acct'))?.id).toBe('acct')
  })

  it('a checkpoint thread that died is started again and checkpoints', async () => {
    const failed: unknown[] = []
    let restarted = false
    let reportDone: (r: CheckpointReport) => void = () => undefined
    const done = new Promise<CheckpointReport>((resolve) => (reportDone = resolve))
    const path = freshPath()
    const store = open(path, {
      checkpointerScript: new URL('../../support/flaky-checkpointer.ts', import.meta.url),
      checkpointerStartBatches: 0,
      checkpointIntervalMs: 5,
      checkpointerRestartMs: 5,
      onCheckpointerError: (err) => failed.push(err),
      onCheckpointerRestart: () => (restarted = true),
      // As above: the first complete checkpoint whose file holds the commit, however early it came.
      onCheckpoint: (r) => {
        if (r.busy === 0 && r.checkpointed === r.log && accountsInFile(path).includes('acct')) reportDone(r)
      },
    })
    await store.accounts.create(accountFixture('acct'), usd(3))
    await done
    expect(failed).toHaveLength(1)
    expect(restarted).toBe(true)
  })

  it('API-key lookups: a change through this store shows at once, through another connection once data_version is read', async () => {
    const path = freshPath()
    // Never re-read data_version within the test: only this store's own changes clear its cache.
    const a = open(path, { keyCacheCheckMs: 3_600_000 })
    const b = open(path)
    await a.accounts.create(accountFixture('acct'), usd(3))
    await a.accounts.addKey({ id: 'k1', accountId: 'acct', hash: 'h1', prefix: 'sk-', createdAt: 1 })
    await a.accounts.addKey({ id: 'k2', accountId: 'acct', hash: 'h2', prefix: 'sk-', createdAt: 1 })
    expect((await a.accounts.findByKeyHash('h1'))?.rateLimits).toEqual(accountFixture('acct').rateLimits)
    expect(await a.accounts.findByKeyHash('nope')).toBeNull()

    await a.accounts.update('acct', { rateLimits: { requestsPerMinute: 3 } })
    expect((await a.accounts.findByKeyHash('h1'))?.rateLimits).toEqual({ requestsPerMinute: 3 })
    await a.accounts.removeKey('acct', 'k1')
    expect(await a.accounts.findByKeyHash('h1')).toBeNull()
    // Adding a key whose hash exists moves it to the new account.
    await a.accounts.addKey({ id: 'k4', accountId: 'acct', hash: 'h4', prefix: 'sk-', createdAt: 1 })
    expect((await a.accounts.findByKeyHash('h4'))?.id).toBe('acct')
    await a.accounts.create(accountFixture('other'), usd(1))
    await a.accounts.addKey({ id: 'k5', accountId: 'other', hash: 'h4', prefix: 'sk-', createdAt: 2 })
    expect((await a.accounts.findByKeyHash('h4'))?.id).toBe('other')
    // A key added by another connection is found at once: unknown keys are never cached.
    await b.accounts.addKey({ id: 'k3', accountId: 'acct', hash: 'h3', prefix: 'sk-', createdAt: 1 })
    expect((await a.accounts.findByKeyHash('h3'))?.id).toBe('acct')

    // Another connection's revocation: kept until data_version is read (at most keyCacheCheckMs)...
    expect((await a.accounts.findByKeyHash('h2'))?.id).toBe('acct')
    await b.accounts.removeKey('acct', 'k2')
    expect((await a.accounts.findByKeyHash('h2'))?.id).toBe('acct')
    // ... and seen by a store that reads it on every lookup.
    const c = open(path, { keyCacheCheckMs: 0 })
    expect((await c.accounts.findByKeyHash('h3'))?.id).toBe('acct')
    await b.accounts.removeKey('acct', 'k3')
    await b.accounts.update('acct', { name: 'renamed' })
    expect(await c.accounts.findByKeyHash('h3')).toBeNull()
  })

  it('a stalled database thread: calls fail with store_unavailable after timeoutMs, and are never run later', async () => {
    const gate = new Int32Array(new SharedArrayBuffer(4))
    const resume = (): void => {
      Atomics.store(gate, 0, 0)
      Atomics.notify(gate, 0)
    }
    onTestFinished(resume)
    // Set up and checked through another connection, whose calls wait the default 5 s: only the
    // stalled calls depend on the short timeout.
    const path = freshPath()
    const other = open(path)
    await other.accounts.create(accountFixture('acct'), usd(3))
    await other.accounts.addKey({ id: 'k1', accountId: 'acct', hash: 'h1', prefix: 'sk-', createdAt: 1 })
    const store = open(path, { stallGate: gate, timeoutMs: 1000, keyCacheCheckMs: 3_600_000 })
    expect((await store.accounts.findByKeyHash('h1'))?.id).toBe('acct')

    Atomics.store(gate, 0, 1)
    // A known key is answered without the disk.
    expect((await store.accounts.findByKeyHash('h1'))?.id).toBe('acct')
    const stalled = await Promise.allSettled([
      store.ledger.reserve('acct', 'held', usd(1), 0, 60_000),
      store.ledger.settle({ id: 'g', accountId: 'acct' }, generationFixture('gen', 'acct', { cost: usd(1) })),
      store.accounts.get('acct'),
      store.ping(),
    ])
    for (const s of stalled) {
      expect(s.status).toBe('rejected')
      expect((s as PromiseRejectedResult).reason).toMatchObject({ code: 'store_unavailable', status: 503 })
    }
    resume()
    // Service resumes...
    expect(await store.ping()).toBeUndefined()
    // ... and what timed out did not happen behind its callers' backs.
    expect(await other.ledger.credits('acct', 0)).toEqual({
      totalCredits: usd(3),
      totalUsage: 0n,
      reserved: 0n,
    })
    expect(await other.generations.get('gen')).toBeNull()
  })

  it('the calls of one turn of the event loop travel to the database thread as one message', async () => {
    const batches: number[] = []
    const store = open(freshPath(), { onBatch: (calls) => batches.push(calls) })
    await store.accounts.create(accountFixture('acct'), usd(10))
    batches.length = 0
    const held = await Promise.all([
      ...Array.from({ length: 40 }, (_, i) => store.ledger.reserve('acct', `g${i}`, usd('0.5'), 0, 60_000)),
      store.ledger.credits('acct', 0),
      store.accounts.get('acct'),
    ])
    expect(batches).toEqual([42])
    expect(held.slice(0, 40).filter((r) => r !== null)).toHaveLength(20)
  })

  it("sends a settlement's record to the database thread as its stored text, and answers with the caller's own", async () => {
    const store = open(freshPath())
    await store.accounts.create(accountFixture('acct'), usd(10))
    await store.ledger.reserve('acct', 'g', usd(1), 0, 60_000)
    // Calls through to the real postMessage; the messages are read afterwards.
    const post = vi.spyOn(Worker.prototype, 'postMessage')
    onTestFinished(() => post.mockRestore())
    const record = generationFixture('gen', 'acct', { cost: usd('0.25') })
    expect(await store.ledger.settle({ id: 'g', accountId: 'acct' }, record, { held: usd(1), now: 1 })).toBe(
      record,
    )
    const settles = post.mock.calls
      .flatMap(([message]) => (message as { calls?: [string, string, unknown[]][] }).calls ?? [])
      .filter(([ns, method]) => ns === 'ledger' && method.startsWith('settle'))
    expect(settles).toHaveLength(1)
    // The fields the charge reads, and the record as one string: none of its objects.
    const crossed = settles[0]![2][1] as Record<string, unknown>
    expect(Object.keys(crossed).sort()).toEqual([
      'accountId',
      'cost',
      'createdAt',
      'generationId',
      'generationTimeMs',
      'json',
    ])
    expect(await store.generations.get('gen')).toEqual(record)
  })

  it('sends the next batch while one is in the thread, up to maxBatchesInFlight; the rest waits', async () => {
    const gate = new Int32Array(new SharedArrayBuffer(4))
    const resume = (): void => {
      Atomics.store(gate, 0, 0)
      Atomics.notify(gate, 0)
    }
    onTestFinished(resume)
    const batches: number[] = []
    const store = open(freshPath(), {
      stallGate: gate,
      maxBatchesInFlight: 2,
      onBatch: (calls) => batches.push(calls),
    })
    await store.accounts.create(accountFixture('acct'), usd(10))
    batches.length = 0
    Atomics.store(gate, 0, 1)
    const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))
    const calls: Promise<unknown>[] = []
    for (let i = 0; i < 4; i++) {
      calls.push(store.ledger.reserve('acct', `g${i}`, usd(1), 0, 60_000))
      await turn()
      await turn()
    }
    // Two batches went while the thread was stalled; the other two calls wait, as one batch.
    expect(batches).toEqual([1, 1])
    resume()
    expect((await Promise.all(calls)).every((r) => r !== null)).toBe(true)
    expect(batches).toEqual([1, 1, 2])
    expect((await store.ledger.credits('acct', 0)).reserved).toBe(usd(4))
  })

  it('a call whose arguments cannot be copied to the database thread fails alone', async () => {
    const store = open(freshPath())
    await store.accounts.create(accountFixture('acct'), usd(3))
    const [bad, good] = await Promise.allSettled([
      store.accounts.update('acct', { name: (() => 'x') as unknown as string }),
      store.accounts.update('acct', { name: 'renamed' }),
    ])
    expect(bad.status).toBe('rejected')
    expect(good).toMatchObject({ status: 'fulfilled', value: { name: 'renamed' } })
    expect((await store.accounts.get('acct'))?.name).toBe('renamed')
  })

  it('a database thread that dies fails its calls with store_unavailable and is started again', async () => {
    const gate = new Int32Array(new SharedArrayBuffer(4))
    const restartsIn: number[] = []
    let starts = 0
    let restarted!: () => void
    const started = new Promise<void>((resolve) => (restarted = resolve))
    const store = open(freshPath(), {
      stallGate: gate,
      onThreadError: (_err, restartInMs) => {
        restartsIn.push(restartInMs)
        Atomics.store(gate, 0, 0)
      },
      onThreadStart: () => {
        if (++starts === 2) restarted()
      },
    })
    await store.accounts.create(accountFixture('acct'), usd(3))
    Atomics.store(gate, 0, 2)
    await expect(store.ledger.credits('acct', 0)).rejects.toMatchObject({ code: 'store_unavailable' })
    expect(restartsIn).toEqual([100])
    await started
    const credits = await store.ledger.credits('acct', 0)
    expect(credits.totalCredits).toBe(usd(3))
    expect(restartsIn).toEqual([100])
  })

  it('keeps everything across closing and reopening the file', async () => {
    const path = freshPath()
    const a = open(path)
    await a.accounts.create(accountFixture('acct'), usd(3))
    await a.accounts.addKey({ id: 'k1', accountId: 'acct', hash: 'h1', prefix: 'sk-', createdAt: 1 })
    await a.ledger.reserve('acct', 'held', usd(1), 0, 10_000)
    const record = generationFixture('gen-1', 'acct', { cost: usd('0.25') })
    await a.ledger.settle({ id: 'g0', accountId: 'acct' }, record)
    const hold = await a.files.reserve('acct', { maxFiles: 5, maxBytes: 1000 }, 0, 10_000)
    if (!hold.ok) throw new Error('reserve')
    const file = {
      id: 'file-1',
      accountId: 'acct',
      bytes: 10,
      createdAt: 5,
      filename: 'a.txt',
      purpose: 'user_data' as const,
      contentType: 'text/plain',
      storageKey: 'k',
    }
    await a.files.commit(hold.token, file, { maxFiles: 5, maxBytes: 1000 }, 0)
    await a.rateLimits.consume([{ key: 'rpm', amount: 1, limit: 1 }], 60_000, 0)
    await a.appliedConfig!.set('acct', '{"name":"x"}')
    await a.close()

    const b = open(path)
    expect(await b.accounts.findByKeyHash('h1')).toEqual(accountFixture('acct'))
    expect(await b.ledger.credits('acct', 1)).toEqual({
      totalCredits: usd(3),
      totalUsage: usd('0.25'),
      reserved: usd(1),
    })
    expect(await b.generations.get('gen-1')).toEqual(record)
    expect(await b.files.get('acct', 'file-1')).toEqual(file)
    expect((await b.rateLimits.consume([{ key: 'rpm', amount: 1, limit: 1 }], 60_000, 1)).allowed).toBe(false)
    expect(await b.appliedConfig!.get('acct')).toBe('{"name":"x"}')
    // The open reservation still ends at its expiry.
    expect((await b.ledger.credits('acct', 10_000)).reserved).toBe(0n)
  })

  it('applies each migration once, and refuses a database newer than it knows', async () => {
    const path = freshPath()
    open(path)
    open(path)
    const raw = new DatabaseSync(path)
    expect(raw.prepare('SELECT version FROM schema_version').all()).toEqual(
      sqliteMigrations.map((m) => ({ version: m.version })),
    )
    raw.prepare('INSERT INTO schema_version (version) VALUES (999)').run()
    raw.close()
    expect(() => createSqliteStore(path)).toThrow(/schema version 999/)
  })

  it("keeps each account's and each key's held total equal to its holds' sum through every way a hold comes and goes", async () => {
    const path = freshPath()
    const store = open(path)
    const raw = new DatabaseSync(path, { readOnly: true })
    onTestFinished(() => raw.close())
    /** The accounts' kept totals against their holds summed from the rows (amounts fit in 64 bits). */
    const totals = () =>
      raw
        .prepare(
          `SELECT a.id, a.held, (SELECT CAST(coalesce(sum(CAST(r.amount AS INTEGER)), 0) AS TEXT)
             FROM reservations r WHERE r.account_id = a.id) AS summed FROM accounts a ORDER BY a.id`,
        )
        .all() as { id: string; held: string | null; summed: string }[]
    /** The keys' kept totals against their holds summed from the rows. */
    const keyTotals = () =>
      raw
        .prepare(
          `SELECT k.key_hash, k.held, (SELECT CAST(coalesce(sum(CAST(r.amount AS INTEGER)), 0) AS TEXT)
             FROM reservations r WHERE r.key_hash = k.key_hash) AS summed FROM key_held k`,
        )
        .all() as { key_hash: string; held: string; summed: string }[]
    /** The open holds (unexpired at `now`) of an account or of a key, summed from the rows. */
    const openRows = (column: 'account_id' | 'key_hash', value: string, now: number) =>
      BigInt(
        (
          raw
            .prepare(
              `SELECT CAST(coalesce(sum(CAST(amount AS INTEGER)), 0) AS TEXT) AS s FROM reservations
               WHERE ${column} = ? AND expires_at > ?`,
            )
            .get(value, now) as { s: string }
        ).s,
      )
    const ids = ['a', 'b']
    for (const id of ids) await store.accounts.create(accountFixture(id), usd(3))
    const key = { id: 'k', accountId: 'a', hash: 'kh', prefix: '', createdAt: 0 }
    await store.accounts.addKey(key)
    const next = seeded(7)
    const holds: { accountId: string; id: string; amount: bigint }[] = []
    let now = 1_000
    let generation = 0
    let most = 0n
    let mostKey = 0n
    const steps = new Map<string, number>()
    for (let step = 0; step < 400; step++) {
      const accountId = ids[next(2)]!
      const kind = [
        'reserve',
        'again',
        'key',
        'key',
        'unlimited',
        'release',
        'settle',
        'over',
        'renew',
        'time',
        'sweep',
      ][next(11)]!
      steps.set(kind, (steps.get(kind) ?? 0) + 1)
      const pick = holds.length > 0 ? holds[next(holds.length)]! : undefined
      const upper = BigInt(1 + next(40)) * usd('0.001')
      const ttl = 50 + next(400)
      if (kind === 'reserve') {
        const r = await store.ledger.reserve(accountId, `h${step}`, upper, now, ttl)
        if (r) holds.push({ accountId, id: r.id, amount: r.amount })
      } else if (kind === 'again' && pick) {
        // The same id held again: the hold is replaced.
        await store.ledger.reserve(pick.accountId, pick.id, upper, now, ttl)
      } else if (kind === 'key' || kind === 'unlimited') {
        // With the key's spending limit, or with the key and no limit (the hold still names the key).
        const hold = { hash: key.hash, limit: kind === 'key' ? usd('0.05') : null, limitReset: null }
        const r = await store.ledger.reserveForKey('a', `k${step}`, upper, now, ttl, hold)
        if (r.reservation) holds.push({ accountId: 'a', id: r.reservation.id, amount: r.reservation.amount })
      } else if (kind === 'release' && pick) {
        await store.ledger.release(pick)
      } else if ((kind === 'settle' || kind === 'over') && pick) {
        // Within its hold, or past it (charged up to the ceiling); a repeat of an id charges nothing.
        const cost = kind === 'settle' ? 1n : usd('0.5')
        await store.ledger.settle(pick, generationFixture(`g${generation++ % 50}`, pick.accountId, { cost }))
      } else if (kind === 'renew' && pick) {
        await store.ledger.renew(pick, now, ttl)
      } else if (kind === 'time') {
        now += next(300)
      } else if (kind === 'sweep') {
        await store.sweep(now)
      }
      for (const t of totals()) {
        if (t.held !== null) expect(t.held, `${kind} at step ${step}`).toBe(t.summed)
        most = BigInt(t.summed) > most ? BigInt(t.summed) : most
      }
      for (const id of ids)
        expect((await store.ledger.credits(id, now)).reserved).toBe(openRows('account_id', id, now))
      for (const t of keyTotals()) {
        expect(t.held, `the key, ${kind} at step ${step}`).toBe(t.summed)
        mostKey = BigInt(t.summed) > mostKey ? BigInt(t.summed) : mostKey
      }
      expect((await store.ledger.keyUsage('a', [key.hash], now))[0]?.held).toBe(
        openRows('key_hash', key.hash, now),
      )
    }
    expect(totals().every((t) => t.held !== null)).toBe(true)
    expect(keyTotals()).toHaveLength(1)
    expect(most).toBeGreaterThan(usd('0.05'))
    expect(mostKey).toBeGreaterThan(usd('0.01'))
    // Every way was taken, more than once.
    expect([...steps.values()].every((n) => n > 10)).toBe(true)

    // A database migrated with holds open keeps no total (NULL) until the account's next hold sums them.
    const w = new DatabaseSync(path)
    w.prepare('UPDATE accounts SET held = NULL').run()
    w.close()
    expect((await store.ledger.credits('a', now)).reserved).toBe(openRows('account_id', 'a', now))
    await store.ledger.release({ accountId: 'a', id: 'nothing' })
    expect(totals().find((t) => t.id === 'a')?.held).toBeNull()
    await store.ledger.reserve('a', 'after', 1n, now, 1_000)
    const a = totals().find((t) => t.id === 'a')!
    expect(a.held).toBe(a.summed)
  })

  it('keeps the totals whoever writes the holds (an older gateway on the file), and sums them again past 18 digits', async () => {
    const path = freshPath()
    const store = open(path)
    await store.accounts.create(accountFixture('a'), 10n ** 30n)
    await store.accounts.addKey({ id: 'k', accountId: 'a', hash: 'kh', prefix: '', createdAt: 0 })
    const hold = { hash: 'kh', limit: 10n ** 29n, limitReset: null }
    await store.ledger.reserveForKey('a', 'first', 5n, 0, 60_000, hold)
    const kept = () => {
      const db = new DatabaseSync(path, { readOnly: true })
      try {
        return {
          account: (db.prepare("SELECT held FROM accounts WHERE id = 'a'").get() as { held: string | null })
            .held,
          key: (
            db.prepare("SELECT held FROM key_held WHERE key_hash = 'kh'").get() as
              { held: string } | undefined
          )?.held,
        }
      } finally {
        db.close()
      }
    }
    expect(kept()).toEqual({ account: '5', key: '5' })
    // A process that knows nothing of the totals writes holds as this gateway did before them.
    const raw = new DatabaseSync(path)
    const insert = raw.prepare(
      "INSERT INTO reservations (account_id, id, amount, expires_at, key_hash) VALUES ('a', ?, ?, 60000, ?)",
    )
    insert.run('old1', '7', 'kh')
    insert.run('old2', '11', null)
    raw.prepare("UPDATE reservations SET amount = '13' WHERE id = 'old2'").run()
    raw.prepare("UPDATE reservations SET key_hash = 'kh' WHERE id = 'old2'").run()
    raw.prepare("DELETE FROM reservations WHERE id = 'first'").run()
    expect(kept()).toEqual({ account: '20', key: '20' })
    expect((await store.ledger.credits('a', 0)).reserved).toBe(20n)
    expect((await store.ledger.keyUsage('a', ['kh'], 0))[0]?.held).toBe(20n)

    // Wider than 18 digits, past what SQLite adds up exactly: the totals are dropped, and summed again.
    const wide = 10n ** 20n + 1n
    insert.run('wide', wide.toString(), 'kh')
    raw.close()
    expect(kept()).toEqual({ account: null, key: undefined })
    expect((await store.ledger.credits('a', 0)).reserved).toBe(20n + wide)
    expect((await store.ledger.keyUsage('a', ['kh'], 0))[0]?.held).toBe(20n + wide)
    expect((await store.ledger.reserveForKey('a', 'next', 3n, 0, 60_000, hold)).reservation?.amount).toBe(3n)
    expect((await store.ledger.credits('a', 0)).reserved).toBe(23n + wide)
    expect((await store.ledger.keyUsage('a', ['kh'], 0))[0]?.held).toBe(23n + wide)
    await store.ledger.release({ accountId: 'a', id: 'wide' })
    await store.ledger.reserveForKey('a', 'last', 2n, 0, 60_000, hold)
    expect(kept()).toEqual({ account: '25', key: '25' })
  })

  it('two connections on one file (two processes) never hold more than the credits', async () => {
    const path = freshPath()
    const a = open(path)
    const b = open(path)
    await a.accounts.create(accountFixture('acct'), usd(10))
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? a : b).ledger.reserve('acct', `g${i}`, usd(1), 0, 60_000),
      ),
    )
    expect(results.filter((r) => r !== null)).toHaveLength(10)
    expect((await b.ledger.credits('acct', 0)).reserved).toBe(usd(10))
    // A key added through one is found through the other at once.
    await a.accounts.addKey({ id: 'k', accountId: 'acct', hash: 'hh', prefix: '', createdAt: 0 })
    expect((await b.accounts.findByKeyHash('hh'))?.id).toBe('acct')
  })

  it('a closed database answers store_unavailable (503), reads and writes alike', async () => {
    const store = open(freshPath())
    await store.accounts.create(accountFixture('acct'), usd(1))
    await store.close()
    for (const call of [
      () => store.ping(),
      () => store.accounts.get('acct'),
      () => store.ledger.reserve('acct', 'g', 1n, 0, 1000),
      () => store.ledger.settle({ id: 'g', accountId: 'acct' }, generationFixture('gen', 'acct')),
    ]) {
      const err = await call().catch((e: unknown) => e)
      expect(err).toBeInstanceOf(GatewayError)
      expect(err).toMatchObject({ code: 'store_unavailable', status: 503 })
    }
  })

  it('a write lock held by another process past the busy timeout is store_unavailable, and nothing is half-written', async () => {
    const path = freshPath()
    const store = open(path, { busyTimeoutMs: 20 })
    await store.accounts.create(accountFixture('acct'), usd(1))
    const other = new DatabaseSync(path)
    other.exec('BEGIN IMMEDIATE')
    const err = await store.ledger
      .settle({ id: 'g', accountId: 'acct' }, generationFixture('gen', 'acct', { cost: 1n }))
      .catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'store_unavailable' })
    other.exec('COMMIT')
    other.close()
    expect(await store.generations.get('gen')).toBeNull()
    expect((await store.ledger.credits('acct', 0)).totalUsage).toBe(0n)
    // Service resumes once the lock is gone.
    expect(
      await store.ledger.settle(
        { id: 'g', accountId: 'acct' },
        generationFixture('gen', 'acct', { cost: 1n }),
      ),
    ).not.toBeNull()
  })
})

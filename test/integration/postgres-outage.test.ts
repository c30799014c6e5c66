import { once } from 'node:events'
import { Writable } from 'node:stream'
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import { GatewayError } from '../../src/errors.ts'
import { createLogger, type Logger } from '../../src/logger.ts'
import { createPostgresStore } from '../../src/store/postgres/index.ts'
import type { Store } from '../../src/store/types.ts'
import { accountFixture, generationFixture } from '../contract/store.ts'
import { startGateway } from '../support/gateway.ts'
import { useTestDatabase } from '../support/postgres.ts'
import { pricedMockModel } from '../support/server-process.ts'

// A TCP proxy between the store and PostgreSQL, cut and restored by the test: with the database
// unreachable every call fails as store_unavailable (never a crash), no half-written state is left,
// and the same store object serves again once the database is back.

interface Proxy {
  port: number
  /** Destroys every connection and stops listening: new connections are refused. */
  cut(): Promise<void>
  /** Listens again on the same port. */
  restore(): Promise<void>
  /**
   * Forwards the first client chunk containing `text`, then cuts everything when the database
   * answers it, before the answer reaches the client: the statement ran, the client never knows.
   */
  cutAfter(text: string): Promise<void>
}

async function startProxy(target: { host: string; port: number }): Promise<Proxy> {
  const sockets = new Set<Socket>()
  let trigger: { text: string; fired: () => void } | null = null
  let server: Server
  const track = (s: Socket) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
    s.on('error', () => {})
  }
  const cut = async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((resolve) => server.close(() => resolve()))
  }
  const listen = async (port: number) => {
    server = createServer((client) => {
      const upstream = connect(target)
      track(client)
      track(upstream)
      // Armed by cutAfter: the database got the statement; its answer is dropped and everything cut.
      let dropAnswer: (() => void) | null = null
      client.on('data', (chunk: Buffer) => {
        upstream.write(chunk)
        if (trigger && chunk.includes(trigger.text)) {
          dropAnswer = trigger.fired
          trigger = null
        }
      })
      upstream.on('data', (chunk: Buffer) => {
        if (!dropAnswer) return void client.write(chunk)
        void cut().then(dropAnswer)
      })
      client.on('close', () => upstream.destroy())
      upstream.on('close', () => client.destroy())
    })
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    return (server.address() as AddressInfo).port
  }
  const port = await listen(0)
  return {
    port,
    cut,
    restore: async () => {
      await listen(port)
    },
    cutAfter: (text) =>
      new Promise<void>((resolve) => {
        trigger = { text, fired: resolve }
      }),
  }
}

/** How long the database stays unreachable in the outage under load. */
const OUTAGE_MS = 10_000

/** A logger, and a promise resolved when it logs `msg`. */
function watchLog(msg: string): { log: Logger; logged: Promise<void> } {
  let seen!: () => void
  const logged = new Promise<void>((resolve) => (seen = resolve))
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      if (chunk.toString().includes(`"msg":"${msg}"`)) seen()
      done()
    },
  })
  return { log: createLogger('warn', sink), logged }
}

const unavailable = expect.objectContaining({ name: 'GatewayError', code: 'store_unavailable', status: 503 })

const database = useTestDatabase()

async function setup(log?: Logger): Promise<{ proxy: Proxy; store: Store; id: string }> {
  const { url } = await database()
  const direct = new URL(url)
  const proxy = await startProxy({ host: direct.hostname, port: Number(direct.port || 5432) })
  const viaProxy = new URL(url)
  viaProxy.hostname = '127.0.0.1'
  viaProxy.port = String(proxy.port)
  const store = await createPostgresStore(viaProxy.toString(), { poolSize: 4, log })
  onTestFinished(async () => {
    await store.close()
    await proxy.cut()
  })
  const id = `acct-${crypto.randomUUID()}`
  await store.accounts.create(accountFixture(id), usd(1))
  return { proxy, store, id }
}

/** usage must equal the sum of the account's records, whatever a cut left behind. */
async function expectConsistent(store: Store, id: string) {
  const { data } = await store.generations.listByAccount(id, { limit: 100 })
  const credits = await store.ledger.credits(id, 0)
  expect(credits.totalUsage).toBe(data.reduce((sum, r) => sum + r.cost, 0n))
  return { credits, records: data }
}

describe('postgres outage', () => {
  it('refuses every call as store_unavailable while cut, and serves again by itself once restored', async () => {
    // The pool's idle connection dies with the cut: handled and logged, never a crash of the process.
    const { log, logged } = watchLog('postgres connection lost')
    const { proxy, store, id } = await setup(log)
    const held = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 60_000))!
    await proxy.cut()
    await logged

    const record = generationFixture(`gen-${crypto.randomUUID()}`, id, { cost: usd('0.1') })
    await expect(store.ping()).rejects.toEqual(unavailable)
    await expect(store.ping()).rejects.toBeInstanceOf(GatewayError)
    await expect(store.ledger.reserve(id, 'g2', usd('0.1'), 0, 60_000)).rejects.toEqual(unavailable)
    await expect(store.ledger.settle(held, record)).rejects.toEqual(unavailable)
    await expect(store.accounts.get(id)).rejects.toEqual(unavailable)
    await expect(store.rateLimits.consume([{ key: id, amount: 1, limit: 3 }], 60_000, 0)).rejects.toEqual(
      unavailable,
    )

    await proxy.restore()
    await store.ping()
    // Nothing of the refused calls was written: only the hold from before the cut.
    const { credits, records } = await expectConsistent(store, id)
    expect(credits).toEqual({ totalCredits: usd(1), totalUsage: 0n, reserved: usd('0.5') })
    expect(records).toEqual([])
    // And the same store object works again.
    expect(await store.ledger.settle(held, record)).toEqual(record)
    expect(await store.ledger.credits(id, 0)).toEqual({
      totalCredits: usd(1),
      totalUsage: usd('0.1'),
      reserved: 0n,
    })
  })

  it('an upload hold cut mid-transaction holds nothing', async () => {
    const { proxy, store, id } = await setup()
    const quota = { maxFiles: 1, maxBytes: 1000 }
    // The totals row was locked and the hold inserted on the database; the COMMIT is never sent.
    const cutting = proxy.cutAfter('INSERT INTO file_holds')
    await expect(store.files.reserve(id, quota, 0, 60_000)).rejects.toEqual(unavailable)
    await cutting
    await proxy.restore()
    // Rolled back, and the lock went with the dead connection: the one slot is free, once.
    expect((await store.files.reserve(id, quota, 1, 60_000)).ok).toBe(true)
    expect(await store.files.reserve(id, quota, 2, 60_000)).toEqual({ ok: false, reason: 'files' })
  })

  it('a rate-limit check is refused while cut and counts once restored', async () => {
    const { proxy, store } = await setup()
    const checks = [{ key: `rpm-${crypto.randomUUID()}`, amount: 1, limit: 1 }]
    await proxy.cut()
    await expect(store.rateLimits.consume(checks, 60_000, 0)).rejects.toEqual(unavailable)
    await expect(store.rateLimits.adjust(checks[0]!.key, 1, 60_000, 0)).rejects.toEqual(unavailable)
    await proxy.restore()
    expect((await store.rateLimits.consume(checks, 60_000, 1)).allowed).toBe(true)
    expect((await store.rateLimits.consume(checks, 60_000, 2)).allowed).toBe(false)
  })

  it('a hold whose answer was lost frees its credits at its expiry', async () => {
    const { proxy, store, id } = await setup()
    const cutting = proxy.cutAfter('junction_reserve')
    await expect(store.ledger.reserve(id, 'g1', usd('0.5'), 0, 60_000)).rejects.toEqual(unavailable)
    await cutting
    await proxy.restore()
    // One statement: it committed, and nobody will settle or release it; the TTL frees it.
    expect((await store.ledger.credits(id, 59_999)).reserved).toBe(usd('0.5'))
    expect((await store.ledger.credits(id, 60_000)).reserved).toBe(0n)
    expect((await store.ledger.reserve(id, 'g2', usd(2), 60_000, 60_000))?.amount).toBe(usd(1))
  })

  it('a settle whose answer was lost is charged once with its record, and settling again changes nothing', async () => {
    const { proxy, store, id } = await setup()
    const held = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 60_000))!
    const record = generationFixture(`gen-${crypto.randomUUID()}`, id, { cost: usd('0.3') })
    // One statement, committed by the database; the answer is lost on the way back. (A settle alone
    // is the batch's statement with one item, prepared under its own name: it also charges the
    // record's key.)
    const cutting = proxy.cutAfter('settle')
    await expect(store.ledger.settle(held, record)).rejects.toEqual(unavailable)
    await cutting
    await proxy.restore()
    const before = await expectConsistent(store, id)
    expect(before.records).toEqual([record])
    // The caller retries: the generation id makes it a no-op, never a second charge.
    expect(await store.ledger.settle(held, record)).toBeNull()
    const { credits, records } = await expectConsistent(store, id)
    expect(records).toEqual([record])
    expect(credits).toEqual({ totalCredits: usd(1), totalUsage: usd('0.3'), reserved: 0n })
  })
  it('a batch of 40 settles whose answer was lost: all committed once, settling again changes nothing', async () => {
    const { proxy, store, id } = await setup()
    const refs = Array.from({ length: 40 }, (_, i) => ({ id: `g${i}`, accountId: id }))
    const records = refs.map(() => generationFixture(`gen-${crypto.randomUUID()}`, id, { cost: usd('0.01') }))
    // One statement for the 40 (group commit), committed by the database; its answer is lost.
    const cutting = proxy.cutAfter('settle_many')
    const lost = await Promise.allSettled(refs.map((r, i) => store.ledger.settle(r, records[i]!)))
    expect(lost.every((r) => r.status === 'rejected' && r.reason instanceof GatewayError)).toBe(true)
    await cutting
    await proxy.restore()
    // The callers retry: every generation id is already settled, nothing is charged twice.
    const again = await Promise.all(refs.map((r, i) => store.ledger.settle(r, records[i]!)))
    expect(again.every((r) => r === null)).toBe(true)
    const after = await expectConsistent(store, id)
    expect(after.records).toHaveLength(40)
    expect(after.credits.totalUsage).toBe(usd('0.4'))
  })
})

describe('a gateway on PostgreSQL through an outage', () => {
  it('answers 503 store_unavailable while cut, loses and doubles no charge, and serves again without a restart', async () => {
    const { url } = await database()
    const direct = new URL(url)
    const proxy = await startProxy({ host: direct.hostname, port: Number(direct.port || 5432) })
    const viaProxy = new URL(url)
    viaProxy.port = String(proxy.port)
    const id = `acct-${crypto.randomUUID()}`
    const key = `sk-outage-${crypto.randomUUID()}`
    const gw = await startGateway({
      env: { GATEWAY_DATABASE_URL: viaProxy.toString() },
      file: { models: [pricedMockModel], accounts: [{ id, keys: [key], credits: 10 }] },
      listen: true,
    })
    onTestFinished(async () => {
      await gw.close()
      await proxy.cut()
    })
    const ask = () =>
      fetch(`${gw.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }),
      })
    const load = async (n: number) => {
      const res = await Promise.all(Array.from({ length: n }, ask))
      return Promise.all(
        res.map(async (r) => ({ status: r.status, body: (await r.json()) as { error?: { code?: string } } })),
      )
    }

    expect((await load(30)).every((r) => r.status === 200)).toBe(true)
    await proxy.cut()
    const cut = await load(30)
    expect(cut.every((r) => r.status === 503 && r.body.error?.code === 'store_unavailable')).toBe(true)
    await proxy.restore()
    // The pool opens new connections by itself: the next requests are answered (a first one may still
    // meet a connection that died in the cut).
    let served = 0
    for (let i = 0; i < 10 && served < 30; i++)
      served += (await load(30)).filter((r) => r.status === 200).length
    expect(served).toBeGreaterThanOrEqual(30)

    const store = await createPostgresStore(url, {})
    onTestFinished(() => store.close())
    const { data } = await store.generations.listByAccount(id, { limit: 1000 })
    expect(data.length).toBe(30 + served)
    expect((await store.ledger.credits(id, Date.now())).totalUsage).toBe(
      data.reduce((x, r) => x + r.cost, 0n),
    )
  })

  it('stopped for 10 s under load: 503 store_unavailable while down, every answer received in full charged once, and it serves again by itself', async () => {
    const { url } = await database()
    const direct = new URL(url)
    const proxy = await startProxy({ host: direct.hostname, port: Number(direct.port || 5432) })
    const viaProxy = new URL(url)
    viaProxy.port = String(proxy.port)
    const id = `acct-${crypto.randomUUID()}`
    const key = `sk-outage-${crypto.randomUUID()}`
    // Answers take 50 ms (streams: 10 chunks 5 ms apart), so requests are in flight when it stops.
    const gw = await startGateway({
      env: { GATEWAY_DATABASE_URL: viaProxy.toString(), MOCK_LATENCY_MS: '50' },
      file: { models: [pricedMockModel], accounts: [{ id, keys: [key], credits: 10 }] },
      listen: true,
    })
    onTestFinished(async () => {
      await gw.close()
      await proxy.cut()
    })
    interface Outcome {
      phase: 'before' | 'down' | 'after'
      status: number
      id: string | null
      /** A 200 whose answer arrived whole (a stream up to [DONE]). */
      full: boolean
      /** The error code of the envelope, or of the stream's error event. */
      code: string | undefined
    }
    const outcomes: Outcome[] = []
    let phase: Outcome['phase'] = 'before'
    let stop = false
    // Told when an outcome of a phase meets a wish (so many of a kind): no polling.
    const wishes: { test: () => boolean; done: () => void }[] = []
    const when = (test: () => boolean) =>
      new Promise<void>((done) => (test() ? done() : wishes.push({ test, done })))
    const count = (p: Outcome['phase'], f: (o: Outcome) => boolean) =>
      outcomes.filter((o) => o.phase === p && f(o)).length
    const one = async (stream: boolean): Promise<void> => {
      const at = phase
      let o: Outcome
      try {
        const res = await fetch(`${gw.origin}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }], stream }),
        })
        const text = await res.text()
        const full = res.status === 200 && (!stream || text.trimEnd().endsWith('data: [DONE]'))
        const error = /"code":"([a-z_]+)"/.exec(text)?.[1]
        o = { phase: at, status: res.status, id: res.headers.get('x-generation-id'), full, code: error }
      } catch {
        o = { phase: at, status: 0, id: null, full: false, code: undefined }
      }
      outcomes.push(o)
      for (const w of wishes.filter((x) => x.test())) {
        wishes.splice(wishes.indexOf(w), 1)
        w.done()
      }
      // A client backs off a little after a failure (and the test does not spin while it is down). This
      // paces the load; no assertion depends on how many requests fit in a span of time.
      if (!o.full) await new Promise((resolve) => setTimeout(resolve, 20))
    }
    const workers = Array.from({ length: 6 }, async (_, w) => {
      for (let i = 0; !stop; i++) await one((w + i) % 2 === 0)
    })

    await when(() => count('before', (o) => o.full) >= 30)
    phase = 'down'
    await proxy.cut()
    await when(() => count('down', (o) => o.status === 503) >= 20)
    // Down for 10 s, the outage issue 27 describes: past the settles' retries, the pool's connection
    // timeout and the listening connection's first reconnections. The length of the outage is the
    // scenario, not a wait for an event: what is asserted (every refusal a 503 store_unavailable, every
    // full answer charged once) holds however much or little the loaded machine ran in that time.
    await new Promise((resolve) => setTimeout(resolve, OUTAGE_MS))
    await proxy.restore()
    phase = 'after'
    await when(() => count('after', (o) => o.full) >= 30)
    stop = true
    await Promise.all(workers)

    // Refused while down: always 503 store_unavailable in the envelope (or, for a stream already
    // answering, its error event); never a hang, a crash or another error.
    for (const o of outcomes.filter((x) => !x.full)) {
      expect(o.status === 503 || o.status === 200, JSON.stringify(o)).toBe(true)
      expect(o.code, JSON.stringify(o)).toBe('store_unavailable')
    }
    expect(count('down', (o) => !o.full)).toBeGreaterThan(20)

    // Nothing lost, nothing doubled: every answer received in full has its record, and the usage is
    // exactly the sum of the records (one per generation id).
    const store = await createPostgresStore(url, {})
    onTestFinished(() => store.close())
    const { data } = await store.generations.listByAccount(id, { limit: 10_000 })
    const recorded = new Set(data.map((r) => r.generationId))
    const full = outcomes.filter((o) => o.full)
    for (const o of full) expect(recorded.has(o.id!), JSON.stringify(o)).toBe(true)
    expect(data.length).toBeGreaterThanOrEqual(full.length)
    expect((await store.ledger.credits(id, Date.now())).totalUsage).toBe(
      data.reduce((x, r) => x + r.cost, 0n),
    )
  }, 60_000)
})

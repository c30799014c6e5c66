import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/store/memory/index.ts'
import { createSqliteStore } from '../../src/store/sqlite/index.ts'
import { postJson, startGateway, type TestGateway } from '../support/gateway.ts'

// A stalled disk (the database thread blocked, as in a write that never returns): the event loop goes
// on. /healthz answers, /readyz fails after its bounded wait, a request that needs the store gets 503
// store_unavailable after the store's; once the disk is back everything is served again, and the
// ledger holds exactly the answers that were delivered.

const dir = mkdtempSync(join(tmpdir(), 'junction-stall-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

let gw: TestGateway | undefined
const gate = new Int32Array(new SharedArrayBuffer(4))
const stall = (): void => void Atomics.store(gate, 0, 1)
const resume = (): void => {
  Atomics.store(gate, 0, 0)
  Atomics.notify(gate, 0)
}
afterEach(async () => {
  resume()
  await gw?.close()
  gw = undefined
})

const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }
const errorCode = async (res: Response): Promise<string> =>
  ((await res.json()) as { error: { code: string } }).error.code

describe('a stalled SQLite disk', () => {
  it('keeps /healthz answering, fails /readyz and store requests in bounded time, and recovers exactly', async () => {
    // Generous waits: only the stalled calls are meant to run out of time, however slow the machine.
    const store = createSqliteStore(join(dir, 'junction.db'), { stallGate: gate, timeoutMs: 3000 })
    gw = await startGateway({
      listen: true,
      overrides: { store },
      file: { database: { readyTimeoutMs: 1000 } },
    })
    const g = gw
    const get = (path: string): Promise<Response> => fetch(`${g.origin}${path}`)
    expect((await get('/readyz')).status).toBe(200)
    const first = await postJson(g, '/v1/chat/completions', hello)
    expect(first.status).toBe(200)
    await first.arrayBuffer()

    stall()
    const blocking = postJson(g, '/v1/chat/completions', hello)
    const streamed = postJson(g, '/v1/chat/completions', { ...hello, stream: true })
    // While those wait on the store, the process answers.
    for (let i = 0; i < 5; i++) {
      const live = await get('/healthz')
      expect(live.status).toBe(200)
      expect(await live.json()).toEqual({ status: 'ok' })
    }
    const ready = await get('/readyz')
    expect(ready.status).toBe(503)
    expect(await errorCode(ready)).toBe('store_unavailable')
    for (const res of [await blocking, await streamed]) {
      expect(res.status).toBe(503)
      expect(await errorCode(res)).toBe('store_unavailable')
    }
    expect((await get('/healthz')).status).toBe(200)

    resume()
    expect((await get('/readyz')).status).toBe(200)
    const after = await postJson(g, '/v1/chat/completions', hello)
    expect(after.status).toBe(200)
    await after.arrayBuffer()

    // Two answers delivered, two charges, nothing held: the stalled requests left no trace.
    const records = await store.generations.listByAccount('dev', { limit: 100 })
    expect(records.data).toHaveLength(2)
    const credits = await store.ledger.credits('dev', Date.now())
    expect(credits.reserved).toBe(0n)
    expect(credits.totalUsage).toBe(records.data.reduce((sum, r) => sum + r.cost, 0n))
    expect(credits.totalUsage).toBeGreaterThan(0n)
  })
})

describe('readiness', () => {
  it('/readyz fails with 503 after database.readyTimeoutMs when the store never answers', async () => {
    const store = createMemoryStore()
    let pings = 0
    store.ping = () => {
      pings++
      return new Promise<void>(() => undefined)
    }
    gw = await startGateway({
      listen: true,
      overrides: { store },
      file: { database: { readyTimeoutMs: 200 } },
    })
    const ready = await fetch(`${gw.origin}/readyz`)
    expect(ready.status).toBe(503)
    expect(await errorCode(ready)).toBe('store_unavailable')
    expect(pings).toBe(1)
    expect((await fetch(`${gw.origin}/healthz`)).status).toBe(200)
  })
})

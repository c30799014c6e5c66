import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { createPostgresStore } from '../../src/store/postgres/index.ts'
import { useTestDatabase } from '../support/postgres.ts'
import {
  jsonOf,
  pricedMockModel,
  stopServer,
  useServerProcesses,
  type ServerProcess,
} from '../support/server-process.ts'

// Two gateway processes on one PostgreSQL database, each with its own group commit (store/postgres/batch.ts),
// under load on one account: the README's bound (nothing overdrawn without an overdraft), exact rate
// limits, and kill -9 of one instance losing no charge of an answer a client received in full.

const ADMIN_KEY = 'admin-key-for-postgres-scale'
const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }

const database = useTestDatabase()
const start = useServerProcesses()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

async function twoGateways(env: Record<string, string> = {}): Promise<[ServerProcess, ServerProcess]> {
  const { url } = await database()
  const dir = mkdtempSync(join(tmpdir(), 'junction-pgscale-'))
  dirs.push(dir)
  const config = join(dir, 'junction.json')
  writeFileSync(config, JSON.stringify({ models: [pricedMockModel] }))
  const all = {
    GATEWAY_DATABASE_URL: url,
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_CONFIG: config,
    GATEWAY_ADMIN_KEY: ADMIN_KEY,
    ...env,
  }
  return Promise.all([start(all), start(all)])
}

const post = (s: ServerProcess, path: string, body: unknown, headers: Record<string, string>) =>
  fetch(`${s.origin}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })
const get = (s: ServerProcess, path: string, headers: Record<string, string>) =>
  fetch(`${s.origin}${path}`, { headers })
const ask = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello from a test' }], max_tokens: 50 }
const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

async function newAccount(s: ServerProcess, id: string, body: Record<string, unknown>) {
  await jsonOf(post(s, '/admin/accounts', { id, name: id, ...body }, admin), 201)
  const { key } = await jsonOf(post(s, `/admin/accounts/${id}/keys`, {}, admin), 201)
  return bearer(key as string)
}

describe('two gateways, one database, one hot account', () => {
  it('400 concurrent requests on credits for 100 answers: none overdrawn, usage = the records', async () => {
    const [a, b] = await twoGateways()
    // What one answer costs, from a first one.
    const probe = await newAccount(a, 'probe', { credits: 1 })
    const first = await jsonOf(post(a, '/v1/chat/completions', ask, probe))
    const cost = (await jsonOf(get(a, `/v1/generation?id=${first.id}`, probe))).usage.cost as number
    expect(cost).toBeGreaterThan(0)

    const hot = await newAccount(a, 'hot', { credits: cost * 100 })
    const results = await Promise.all(
      Array.from({ length: 400 }, (_, i) => post(i % 2 ? a : b, '/v1/chat/completions', ask, hot)),
    )
    const statuses = results.map((r) => r.status)
    expect(statuses.every((s) => s === 200 || s === 402)).toBe(true)
    const ok = results.filter((r) => r.status === 200)
    const ids = ok.map((r) => r.headers.get('x-generation-id') as string)
    for (const r of results) await r.text()
    expect(ok.length).toBeGreaterThan(0)
    expect(statuses).toContain(402)
    // (More than 100 may be answered: a hold taken from the last credits is partial, and its answer is
    // charged at most that hold, the rest kept on its record as unbilled.)
    const costs = await Promise.all(
      ids.map(async (id, i) => (await jsonOf(get(i % 2 ? a : b, `/v1/generation?id=${id}`, hot))).usage.cost),
    )
    const sum = costs.reduce((x: number, y: number) => x + y, 0)
    const credits = (await jsonOf(get(b, '/v1/credits', hot))).data
    expect(credits.total_usage).toBeCloseTo(sum, 12)
    // The bound without an overdraft: 0 (every charge within its hold, every hold within the balance).
    expect(credits.balance).toBeGreaterThanOrEqual(0)
    expect((await jsonOf(get(a, '/v1/credits', hot))).data).toEqual(credits)
  })

  it('a requests-per-minute limit of 40 over both, 120 concurrent requests: exactly 40 admitted', async () => {
    const [a, b] = await twoGateways()
    const key = await newAccount(a, 'limited', { credits: 10, rate_limits: { requests_per_minute: 40 } })
    const results = await Promise.all(
      Array.from({ length: 120 }, (_, i) => post(i % 2 ? a : b, '/v1/chat/completions', ask, key)),
    )
    for (const r of results) await r.text()
    const statuses = results.map((r) => r.status)
    expect(statuses.filter((s) => s === 200)).toHaveLength(40)
    expect(statuses.filter((s) => s === 429)).toHaveLength(80)
  })

  it('kill -9 of one under load: every answer received in full has its record and charge; the other serves on', async () => {
    // Streams of ten chunks 10 ms apart: many are mid-way when the process dies.
    const [a, b] = await twoGateways({ MOCK_LATENCY_MS: '100' })
    const key = await newAccount(a, 'busy', { credits: 10 })
    const streamed = { ...ask, stream: true }
    // Clients that send their next request as soon as one ends (20 on each instance), so that streams
    // are always mid-way on A when it dies; B's go on until B has answered 40 more after that.
    const results: { s: ServerProcess; id: string | null; full: boolean }[] = []
    let completeOnA = 0
    let completeOnBAfter = 0
    let killed: Promise<void> | undefined
    let stop!: () => void
    const stopped = new Promise<void>((resolve) => (stop = resolve))
    let done = false
    const one = async (s: ServerProcess) => {
      try {
        const res = await post(s, '/v1/chat/completions', streamed, key)
        const id = res.headers.get('x-generation-id')
        const text = await res.text()
        const full = res.status === 200 && text.trimEnd().endsWith('data: [DONE]')
        if (full && s === a && ++completeOnA === 20) killed = stopServer(a, 'SIGKILL')
        if (full && s === b && killed && ++completeOnBAfter === 40) stop()
        return { s, id, full }
      } catch {
        return { s, id: null, full: false }
      }
    }
    const loop = async (s: ServerProcess) => {
      while (!done) {
        const r = await one(s)
        results.push(r)
        // A dead instance answers nothing more.
        if (s === a && !r.full && killed) return
      }
    }
    const clients = Array.from({ length: 40 }, (_, i) => loop(i % 2 ? a : b))
    await stopped
    done = true
    await Promise.all(clients)
    await killed
    expect(a.child.signalCode).toBe('SIGKILL')
    const cut = results.filter((r) => r.s === a && !r.full)
    expect(cut.length).toBeGreaterThan(0)
    // B served every one of its own.
    expect(results.filter((r) => r.s === b).every((r) => r.full)).toBe(true)

    // Every answer received in full has its record; the usage is exactly the sum of the records (a cut
    // answer may have its record too: it ran to its end inside the dead process before the client read
    // it), so nothing was charged twice or without its record.
    const store = await createPostgresStore((await database()).url, {})
    onTestFinished(() => store.close())
    const records = (await store.generations.listByAccount('busy', { limit: 1000 })).data
    const recorded = new Set(records.map((r) => r.generationId))
    const full = results.filter((r) => r.full)
    expect(full.length).toBeGreaterThanOrEqual(60)
    for (const r of full) expect(recorded.has(r.id!)).toBe(true)
    // Usage and records in one snapshot: a batch the dead process sent just before dying may still be
    // committing (the server finishes a statement it has received), and commits records and charges
    // together.
    const client = new pg.Client((await database()).url)
    await client.connect()
    onTestFinished(() => client.end())
    const { rows } = await client.query<{ usage: string; records: string }>(
      `SELECT (SELECT usage FROM ledger WHERE account_id = 'busy') AS usage,
         (SELECT coalesce(sum(cost), 0) FROM generations WHERE account_id = 'busy') AS records`,
    )
    expect(rows[0]!.usage).toBe(rows[0]!.records)
    const now = await store.ledger.credits('busy', Date.now())
    // The dead instance's holds free their credits at their expiry (a day later: surely expired).
    const later = await store.ledger.credits('busy', Date.now() + 86_400_000)
    expect(later.reserved).toBe(0n)
    expect(later.totalUsage).toBe(now.totalUsage)
  })
})

import { once } from 'node:events'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import {
  jsonOf,
  pricedMockModel,
  stopServer,
  useServerProcesses,
  type ServerProcess,
} from '../support/server-process.ts'

// server.ts as a user runs it, on the default embedded backend (a SQLite file): what a stop, clean
// (SIGTERM) or not (SIGKILL), must not lose.

const ADMIN_KEY = 'admin-key-for-restart-tests'
const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})
const start = useServerProcesses()

/**
 * A mock provider whose answers take ten minutes: a request to it is still in flight whenever the
 * gateway is killed, whatever the machine's speed.
 */
const stalled = {
  providers: { stalled: { kind: 'mock', latencyMs: 600_000 } },
  models: [{ ...pricedMockModel, slug: 'stalled/chat', provider: 'stalled' }],
}

/** A data directory and the environment of a gateway keeping its state there. */
function workspace(): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'junction-restart-'))
  dirs.push(dir)
  const config = join(dir, 'junction.json')
  writeFileSync(
    config,
    JSON.stringify({
      providers: stalled.providers,
      models: [pricedMockModel, ...stalled.models],
    }),
  )
  return {
    GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}`,
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_CONFIG: config,
    GATEWAY_ADMIN_KEY: ADMIN_KEY,
  }
}

type Running = ServerProcess
const json = jsonOf

const post = (s: Running, path: string, body: unknown, headers: Record<string, string> = admin) =>
  fetch(`${s.origin}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })
const getJson = (s: Running, path: string, headers: Record<string, string> = admin) =>
  json(fetch(`${s.origin}${path}`, { headers }))

/** An account with `credits` USD and a key, made through the admin API. */
async function adminAccount(s: Running, credits: number): Promise<Record<string, string>> {
  await json(post(s, '/admin/accounts', { id: 'acme', name: 'Acme', credits }), 201)
  const { key } = await json(post(s, '/admin/accounts/acme/keys', {}), 201)
  return { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
}

/** A chat request read to its end: its generation id when the whole answer arrived, else null. */
async function chat(
  s: Running,
  auth: Record<string, string>,
  stream: boolean,
  model = 'mock/chat',
): Promise<string | null> {
  try {
    const res = await post(
      s,
      '/v1/chat/completions',
      { model, messages: [{ role: 'user', content: 'hello there' }], stream },
      auth,
    )
    const text = await res.text()
    if (res.status !== 200) return null
    if (stream && !text.trimEnd().endsWith('data: [DONE]')) return null
    return res.headers.get('x-generation-id')
  } catch {
    return null // cut by the kill
  }
}

/** Every generation record of the account, through the admin API's pages. */
async function allRecords(s: Running): Promise<{ generationId: string; usage: { cost: number } }[]> {
  const out = []
  let before: string | null = null
  do {
    const page: { data: { generationId: string; usage: { cost: number } }[]; next_cursor: string | null } =
      await getJson(
        s,
        `/admin/accounts/acme/generations?limit=100${before ? `&before=${encodeURIComponent(before)}` : ''}`,
      )
    out.push(...page.data)
    before = page.next_cursor
  } while (before)
  return out
}

const stop = stopServer

describe('restart on the SQLite backend', () => {
  it('with nothing configured keeps its state in ./data/junction.db of its working directory, and says so', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-default-'))
    dirs.push(dir)
    const s = await start({}, dir)
    expect(s.output()).toContain(join(dir, 'data', 'junction.db'))
    expect(s.output()).toMatch(/state store: sqlite/)
    expect(existsSync(join(dir, 'data', 'junction.db'))).toBe(true)
    const auth = { authorization: 'Bearer sk-dev', 'content-type': 'application/json' }
    const id = await chat(s, auth, false)
    expect(id).not.toBeNull()
    await stop(s, 'SIGTERM')
    const again = await start({}, dir)
    expect((await getJson(again, `/v1/generation?id=${id}`, auth)).generationId).toBe(id)
  })

  it('after SIGTERM: balances, the admin-made account and key, records and files are all there and work', async () => {
    const env = workspace()
    const first = await start(env)
    expect(first.output()).toMatch(/state store: sqlite/)
    const auth = await adminAccount(first, 10)
    const ids = [
      await chat(first, auth, false),
      await chat(first, auth, true),
      await chat(first, auth, false),
    ]
    expect(ids.every((id) => id !== null)).toBe(true)
    const form = new FormData()
    form.set('purpose', 'user_data')
    form.set('file', new Blob(['kept across restarts']), 'notes.txt')
    const file = await json(
      fetch(`${first.origin}/v1/files`, {
        method: 'POST',
        headers: { authorization: auth.authorization },
        body: form,
      }),
    )
    const before = await getJson(first, '/admin/accounts/acme')
    expect(before.credits.total_usage).toBeGreaterThan(0)
    // Three requests in a row make the account busy: the first instance holds some ahead for it.
    expect(before.credits.reserved).toBeGreaterThan(0)
    const records = await Promise.all(ids.map((id) => getJson(first, `/v1/generation?id=${id}`, auth)))
    await stop(first, 'SIGTERM')

    const second = await start(env)
    // What the first held ahead for the account (billing/spare-holds.ts) it gave back as it stopped.
    expect(await getJson(second, '/admin/accounts/acme')).toEqual({
      ...before,
      credits: { ...before.credits, reserved: 0 },
    })
    for (const [i, id] of ids.entries()) {
      expect(await getJson(second, `/v1/generation?id=${id}`, auth)).toEqual(records[i])
    }
    const content = await fetch(`${second.origin}/v1/files/${file.id}/content`, { headers: auth })
    expect(await content.text()).toBe('kept across restarts')
    // The key still works, and charges on top of what was there.
    expect(await chat(second, auth, false)).not.toBeNull()
    const after = await getJson(second, '/admin/accounts/acme')
    expect(after.credits.total_usage).toBeGreaterThan(before.credits.total_usage)
    expect(await allRecords(second)).toHaveLength(4)
  })

  it('after kill -9 in the middle of 200 concurrent requests: every complete answer has one record, and credits = start − records', async () => {
    const env = workspace()
    const first = await start(env)
    const auth = await adminAccount(first, 1000)
    let completed = 0
    let killAt!: () => void
    const halfway = new Promise<void>((resolve) => (killAt = resolve))
    const answered: (string | null)[] = []
    // 20 of them go to the stalled provider: in flight at the kill, so it lands in the middle.
    const stalledAnswers: Promise<string | null>[] = Array.from({ length: 20 }, (_, i) =>
      chat(first, auth, i % 2 === 0, 'stalled/chat'),
    )
    const requests = Array.from({ length: 180 }, async (_, i) => {
      const id = await chat(first, auth, i % 2 === 0)
      answered.push(id)
      if (id !== null && ++completed === 60) killAt()
    })
    await halfway
    const exited = once(first.child, 'exit')
    first.child.kill('SIGKILL')
    await Promise.all(requests)
    await exited
    const complete = answered.filter((id): id is string => id !== null)
    expect(complete.length).toBeGreaterThanOrEqual(60)
    // The kill landed in the middle: the stalled requests were cut, none of them answered.
    expect(await Promise.all(stalledAnswers)).toEqual(Array(20).fill(null))

    const second = await start(env)
    const records = await allRecords(second)
    const recorded = records.map((r) => r.generationId)
    expect(new Set(recorded).size).toBe(recorded.length)
    for (const id of complete) expect(recorded).toContain(id)
    const account = await getJson(second, '/admin/accounts/acme')
    const spent = records.reduce((sum, r) => sum + usd(r.usage.cost), 0n)
    expect(spent).toBeGreaterThan(0n)
    expect(usd(account.credits.total_usage)).toBe(spent)
    expect(usd(account.credits.balance)).toBe(usd(1000) - spent)
  })
})

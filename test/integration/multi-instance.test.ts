import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { useTestDatabase } from '../support/postgres.ts'
import { jsonOf, pricedMockModel, useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// Two gateway processes on one PostgreSQL database and one files directory (the shared-volume setup
// of the README): they must behave as one gateway.

const ADMIN_KEY = 'admin-key-for-multi-instance'
const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }
const LIMITED_KEY = 'sk-limited-0001'

const database = useTestDatabase()
const start = useServerProcesses()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

async function twoGateways(): Promise<[ServerProcess, ServerProcess]> {
  const { url } = await database()
  const dir = mkdtempSync(join(tmpdir(), 'junction-multi-'))
  dirs.push(dir)
  const config = join(dir, 'junction.json')
  writeFileSync(
    config,
    JSON.stringify({
      models: [pricedMockModel],
      accounts: [{ id: 'limited', keys: [LIMITED_KEY], credits: 10, rateLimits: { requestsPerMinute: 3 } }],
    }),
  )
  const env = {
    GATEWAY_DATABASE_URL: url,
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_CONFIG: config,
    GATEWAY_ADMIN_KEY: ADMIN_KEY,
  }
  // Started together: the migrations run once, under the lock, whichever comes first.
  return Promise.all([start(env), start(env)])
}

const post = (s: ServerProcess, path: string, body: unknown, headers: Record<string, string>) =>
  fetch(`${s.origin}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })
const get = (s: ServerProcess, path: string, headers: Record<string, string>) =>
  fetch(`${s.origin}${path}`, { headers })
const ask = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello from a test' }] }
const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

describe('two gateways on one PostgreSQL', () => {
  it('share keys, credits under concurrency, rate limits, generations and files', async () => {
    const [a, b] = await twoGateways()

    // A key issued through A works on B at once.
    await jsonOf(post(a, '/admin/accounts', { id: 'acme', name: 'Acme', credits: 0.001 }, admin), 201)
    const { key } = await jsonOf(post(a, '/admin/accounts/acme/keys', {}, admin), 201)
    const acme = bearer(key)
    expect((await jsonOf(get(b, '/v1/credits', acme))).data).toEqual({
      total_credits: 0.001,
      total_usage: 0,
      balance: 0.001,
    })

    // Credits under concurrency, spread over both: never overdrawn past one request's cost, and the
    // usage is exactly the sum of the records whichever instance wrote them.
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) => post(i % 2 ? a : b, '/v1/chat/completions', ask, acme)),
    )
    const statuses = results.map((r) => r.status)
    const ok = results.filter((r) => r.status === 200)
    expect(statuses.every((s) => s === 200 || s === 402)).toBe(true)
    expect(ok.length).toBeGreaterThan(0)
    expect(statuses).toContain(402)
    const ids = ok.map((r) => r.headers.get('x-generation-id') as string)
    for (const r of results) await r.text()
    const records = await Promise.all(
      ids.map(
        async (id, i) => (await jsonOf(get(i % 2 ? b : a, `/v1/generation?id=${id}`, acme))).usage.cost,
      ),
    )
    const sum = records.reduce((x: number, y: number) => x + y, 0)
    const credits = (await jsonOf(get(b, '/v1/credits', acme))).data
    expect(credits.total_usage).toBeCloseTo(sum, 12)
    expect(credits.balance).toBeGreaterThanOrEqual(-Math.max(...records))
    expect((await jsonOf(get(a, '/v1/credits', acme))).data).toEqual(credits)

    // 3 requests a minute: exactly 3 across both.
    const limited = bearer(LIMITED_KEY)
    const tries = []
    for (let i = 0; i < 6; i++) tries.push(await post(i % 2 ? a : b, '/v1/chat/completions', ask, limited))
    expect(tries.map((r) => r.status).sort()).toEqual([200, 200, 200, 429, 429, 429])
    for (const r of tries) await r.text()

    // A generation made through A is read through B.
    await jsonOf(post(a, '/admin/accounts/acme/credits', { amount: 1 }, admin))
    const answer = await jsonOf(post(a, '/v1/chat/completions', ask, acme))
    const record = await jsonOf(get(b, `/v1/generation?id=${answer.id}`, acme))
    expect(record).toMatchObject({ generationId: answer.id, model: 'mock/chat', provider: 'mock' })

    // A file uploaded through A is listed and downloaded through B.
    const form = new FormData()
    form.append('purpose', 'user_data')
    form.append('file', new Blob(['shared bytes across instances']), 'shared.txt')
    const uploaded = await jsonOf(
      fetch(`${a.origin}/v1/files`, {
        method: 'POST',
        headers: { authorization: acme.authorization },
        body: form,
      }),
    )
    const listed = await jsonOf(get(b, '/v1/files', acme))
    expect(listed.data.map((f: { id: string }) => f.id)).toContain(uploaded.id)
    const content = await get(b, `/v1/files/${uploaded.id}/content`, acme)
    expect(content.status).toBe(200)
    expect(await content.text()).toBe('shared bytes across instances')
  })
})

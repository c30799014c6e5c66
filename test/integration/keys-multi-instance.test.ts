import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import OpenAI from 'openai'
import { afterAll, describe, expect, it } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import { useTestDatabase } from '../support/postgres.ts'
import { jsonOf, useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// A key's limit is the account's business on every instance: two gateway processes on one
// PostgreSQL database, the OpenAI SDK calling both at once with one key limited to $0.01.

const ADMIN_KEY = 'admin-key-for-keys-multi-instance'
const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }
const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

const database = useTestDatabase()
const start = useServerProcesses()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

async function twoGateways(): Promise<[ServerProcess, ServerProcess]> {
  const { url } = await database()
  const dir = mkdtempSync(join(tmpdir(), 'junction-keys-'))
  dirs.push(dir)
  const config = join(dir, 'junction.json')
  // The mock model dear enough that a few answers reach $0.01.
  writeFileSync(
    config,
    JSON.stringify({
      models: [
        {
          slug: 'mock/chat',
          provider: 'mock',
          upstreamModel: 'chat',
          pricing: { prompt: 30, completion: 70 },
        },
      ],
    }),
  )
  const env = {
    GATEWAY_DATABASE_URL: url,
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_CONFIG: config,
    GATEWAY_ADMIN_KEY: ADMIN_KEY,
  }
  return Promise.all([start(env), start(env)])
}

const post = (s: ServerProcess, path: string, body: unknown, headers: Record<string, string>) =>
  fetch(`${s.origin}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })

async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'ok'
  } catch (err) {
    if (err instanceof OpenAI.APIError) return `${err.status} ${String(err.code)}`
    throw err
  }
}

describe('two gateways on one PostgreSQL', () => {
  it('hold a key to its $0.01 limit together, concurrent requests included', async () => {
    const [a, b] = await twoGateways()
    await jsonOf(post(a, '/admin/accounts', { id: 'team', credits: 10 }, admin), 201)
    const ops = await jsonOf(post(a, '/admin/accounts/team/keys', { management: true }, admin), 201)
    // Made through A, with the management key; used at once on both.
    const made = await jsonOf(post(a, '/v1/keys', { name: 'dev', limit: 0.01 }, bearer(ops.key)), 201)
    const clients = [a, b].map(
      (s) => new OpenAI({ baseURL: `${s.origin}/v1`, apiKey: made.key as string, maxRetries: 0 }),
    )
    const ask = (i: number) =>
      outcome(
        clients[i % 2]!.chat.completions.create({
          model: 'mock/chat',
          messages: [{ role: 'user', content: `hello number ${i}` }],
        }),
      )

    const burst = await Promise.all(Array.from({ length: 30 }, (_, i) => ask(i)))
    expect(burst.every((o) => o === 'ok' || o === '402 key_limit_exceeded')).toBe(true)
    expect(burst).toContain('ok')
    let i = 0
    while ((await ask(i)) === 'ok') i++
    expect(await ask(i + 1)).toBe('402 key_limit_exceeded')

    // The records of the key, whichever instance wrote them, sum to its limit and no further.
    const page = await jsonOf(
      fetch(`${b.origin}/admin/accounts/team/generations?limit=500&key=${made.data.hash}`, {
        headers: admin,
      }),
    )
    const sum = (page.data as { usage: { cost: number } }[]).reduce((s, r) => s + usd(r.usage.cost), 0n)
    expect(sum).toBe(usd('0.01'))
    expect(page.data).toHaveLength(burst.filter((o) => o === 'ok').length + i)
    const seen = await jsonOf(fetch(`${b.origin}/v1/key`, { headers: bearer(made.key) }))
    expect(seen.data).toMatchObject({ usage: 0.01, limit: 0.01, limit_remaining: 0 })
    // The account itself was charged exactly the same.
    const credits = await jsonOf(fetch(`${a.origin}/v1/credits`, { headers: bearer(ops.key) }))
    expect(credits.data.total_usage).toBe(0.01)
  })
})

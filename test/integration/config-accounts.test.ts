import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { jsonOf, stopServer, useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// server.ts as a new user runs it on one SQLite file: a first start without configuration (the
// development account), accounts made and tuned through the admin API, then restarts in production
// with a config file.

const ADMIN_KEY = 'admin-key-for-config-accounts'
const admin = { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' }
const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})
const start = useServerProcesses()

const send = (s: ServerProcess, method: string, path: string, body: unknown, headers = admin) =>
  fetch(`${s.origin}${path}`, { method, headers, body: JSON.stringify(body) })
const chat = (s: ServerProcess, key: string) =>
  send(s, 'POST', '/v1/chat/completions', hello, {
    authorization: `Bearer ${key}`,
    'content-type': 'application/json',
  })
const revokedLine = /development key sk-dev is revoked/g

describe('configured accounts and the store', () => {
  it('revokes sk-dev once accounts are configured (logged once) and keeps admin-made settings the file leaves out', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-accounts-'))
    dirs.push(dir)
    const base = {
      GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}`,
      GATEWAY_FILES_DIR: join(dir, 'files'),
      GATEWAY_ADMIN_KEY: ADMIN_KEY,
    }

    // First start: nothing configured, the development key works; acme is made and tuned by the admin.
    const first = await start(base)
    expect((await chat(first, 'sk-dev')).status).toBe(200)
    await jsonOf(send(first, 'POST', '/admin/accounts', { id: 'acme', credits: 5 }), 201)
    await jsonOf(send(first, 'PUT', '/admin/accounts/acme/discount', { discount_percent: 0.1 }))
    await jsonOf(
      send(first, 'PUT', '/admin/accounts/acme/discount', { discount_percent: 0.5, model: 'mock/chat' }),
    )
    await jsonOf(send(first, 'PUT', '/admin/accounts/acme/rate-limits', { requests_per_minute: 2 }))
    const { key } = await jsonOf(send(first, 'POST', '/admin/accounts/acme/keys', {}), 201)
    const tuned = await jsonOf(fetch(`${first.origin}/admin/accounts/acme`, { headers: admin }))
    await stopServer(first, 'SIGTERM')

    // Restart in production with a config file naming acme with a key and credits only.
    const config = join(dir, 'junction.json')
    writeFileSync(
      config,
      JSON.stringify({ accounts: [{ id: 'acme', keys: ['sk-acme-from-file'], credits: 1 }] }),
    )
    const env = { ...base, GATEWAY_CONFIG: config, NODE_ENV: 'production' }
    const second = await start(env)
    const account = await jsonOf(fetch(`${second.origin}/admin/accounts/acme`, { headers: admin }))
    expect(account).toEqual(tuned)
    expect(account).toMatchObject({
      discount_percent: 0.1,
      model_discounts: { 'mock/chat': 0.5 },
      rate_limits: { requests_per_minute: 2 },
    })
    const refused = await chat(second, 'sk-dev')
    expect(refused.status).toBe(401)
    // Both keys of acme work, and its own limit of 2 requests a minute holds.
    expect((await chat(second, 'sk-acme-from-file')).status).toBe(200)
    expect((await chat(second, key)).status).toBe(200)
    expect((await chat(second, key)).status).toBe(429)
    expect(second.output().match(revokedLine)).toHaveLength(1)
    await stopServer(second, 'SIGTERM')

    // A third start: the key stays revoked, and it is not logged again.
    const third = await start(env)
    expect((await chat(third, 'sk-dev')).status).toBe(401)
    expect(third.output()).not.toMatch(revokedLine)
    expect(
      (await jsonOf(fetch(`${third.origin}/admin/accounts/acme`, { headers: admin }))).discount_percent,
    ).toBe(0.1)
  })
})

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// The console's session: a key is exchanged for an HttpOnly cookie, which the API routes then take as
// a credential (with the CSRF header on state-changing calls); sign-out and expiry end it.

const ADMIN = 'admin-key-0123456789abcdef'
const accounts = [
  { id: 'acme', name: 'Acme', credits: 10, keys: ['sk-acme-0123456789'] },
  { id: 'other', name: 'Other', credits: 10, keys: ['sk-other-0123456789'] },
]

interface Clock {
  now: () => number
  skew: number
}

async function gateway(env: Record<string, string> = {}, clock?: Clock): Promise<TestGateway> {
  const gw = await startGateway({
    env: { GATEWAY_ADMIN_KEY: ADMIN, MOCK_TASK_DELAY_MS: '0', ...env },
    file: { accounts },
    overrides: clock ? { now: clock.now } : {},
  })
  onTestFinished(() => gw.close())
  return gw
}

async function signIn(gw: TestGateway, key: string) {
  const res = await gw.app.inject({ method: 'POST', url: '/console/session', payload: { key } })
  const cookie = String(res.headers['set-cookie'] ?? '')
  return { res, cookie: cookie.split(';')[0]!, setCookie: cookie, body: res.json() }
}

describe('console page and assets', () => {
  it('serves the page uncached under a strict CSP, and hashed assets cached for good', async () => {
    const gw = await gateway()
    const page = await gw.app.inject({ method: 'GET', url: '/console' })
    expect(page.statusCode).toBe(200)
    expect(page.headers['content-type']).toMatch(/^text\/html/)
    expect(page.headers['cache-control']).toBe('no-store')
    const csp = String(page.headers['content-security-policy'])
    expect(csp).toContain("default-src 'self'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("style-src 'self'")
    expect(csp).not.toContain('unsafe-inline')
    expect(csp).toContain("frame-ancestors 'none'")
    // No inline script or style in the page itself.
    expect(page.body).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
    expect(page.body).not.toMatch(/<style|style=/)
    const app = /src="(\/console\/assets\/([0-9a-f]{16})\/app\.js)"/.exec(page.body)
    expect(app).not.toBeNull()
    const asset = await gw.app.inject({
      method: 'GET',
      url: app![1]!,
      headers: { 'accept-encoding': 'gzip' },
    })
    expect(asset.statusCode).toBe(200)
    expect(asset.headers['content-type']).toMatch(/^text\/javascript/)
    expect(asset.headers['cache-control']).toBe('public, max-age=31536000, immutable')
    const chartUrl = `/console/assets/${app![2]}/vendor/uplot.js`
    const chart = await gw.app.inject({ method: 'GET', url: chartUrl })
    expect(chart.statusCode).toBe(200)
    expect(chart.body).toContain('uPlot')
    const gzipped = await gw.app.inject({
      method: 'GET',
      url: chartUrl,
      headers: { 'accept-encoding': 'gzip, br' },
    })
    expect(gzipped.headers['content-encoding']).toBe('gzip')
    expect(gzipped.rawPayload.length).toBeLessThan(chart.rawPayload.length / 2)
    // Another version's URL is gone, not served with this version's bytes.
    const stale = await gw.app.inject({ method: 'GET', url: '/console/assets/0000000000000000/app.js' })
    expect(stale.statusCode).toBe(404)
    expect(stale.json().error.code).toBe('route_not_found')
  })

  it('is off with GATEWAY_CONSOLE=off: no page, no session, and no cookie is a credential', async () => {
    const on = await gateway()
    const { cookie } = await signIn(on, 'sk-acme-0123456789')
    const gw = await gateway({ GATEWAY_CONSOLE: 'off' })
    expect((await gw.app.inject({ method: 'GET', url: '/console' })).statusCode).toBe(404)
    expect((await signIn(gw, 'sk-acme-0123456789')).res.statusCode).toBe(404)
    const res = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })
    expect(res.statusCode).toBe(401)
    expect(res.json().error.code).toBe('missing_api_key')
  })
})

describe('console sign-in', () => {
  it('refuses every wrong key the same way, and never echoes it', async () => {
    const gw = await gateway()
    const wrong = ['sk-nope', '', ' ', 'x'.repeat(600), 'y'.repeat(20_000), `${ADMIN}x`, 'sk-acme-012345678']
    const answers = await Promise.all(wrong.map((key) => signIn(gw, key)))
    for (const [i, a] of answers.entries()) {
      expect(a.res.statusCode).toBe(401)
      expect(a.setCookie).toBe('')
      expect(a.body.error).toEqual({
        message: 'invalid key',
        type: 'authentication_error',
        code: 'invalid_api_key',
        param: null,
      })
      if (wrong[i]!.trim() !== '') expect(a.res.body).not.toContain(wrong[i]!.trim())
    }
  })

  it('sets an HttpOnly, SameSite=Strict cookie (Secure behind an https public URL) and answers the CSRF token', async () => {
    const gw = await gateway()
    const { res, setCookie, body } = await signIn(gw, 'sk-acme-0123456789')
    expect(res.statusCode).toBe(200)
    expect(setCookie).toMatch(/^junction_console=[^;]+; Path=\/; Max-Age=3600; HttpOnly; SameSite=Strict$/)
    expect(setCookie).not.toContain('sk-acme')
    expect(body).toMatchObject({ role: 'account', account: { id: 'acme', name: 'Acme' } })
    expect(body.csrf_token).toMatch(/^[\w-]{20,}$/)

    const https = await gateway({ GATEWAY_PUBLIC_URL: 'https://gw.example.test' })
    expect((await signIn(https, 'sk-acme-0123456789')).setCookie).toMatch(/; Secure$/)
  })

  it('limits sign-in attempts per client address', async () => {
    const gw = await gateway()
    for (let i = 0; i < 10; i++) expect((await signIn(gw, `sk-guess-${i}`)).res.statusCode).toBe(401)
    const limited = await signIn(gw, 'sk-acme-0123456789')
    expect(limited.res.statusCode).toBe(429)
    expect(limited.res.headers['retry-after']).toMatch(/^\d+$/)
  })
})

describe('a console session as a credential', () => {
  it('reads the account’s own routes; state-changing calls need the CSRF header', async () => {
    const gw = await gateway()
    const { cookie, body } = await signIn(gw, 'sk-acme-0123456789')
    const account = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })
    expect(account.json()).toMatchObject({ id: 'acme', credits: { balance: 10, reserved: 0, available: 10 } })
    expect(
      (await gw.app.inject({ method: 'GET', url: '/console/session', headers: { cookie } })).json(),
    ).toMatchObject({
      role: 'account',
      csrf_token: body.csrf_token,
    })

    const chat = { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }
    const post = (headers: Record<string, string>) =>
      gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: { cookie, ...headers },
        payload: chat,
      })
    const forgeries: Record<string, string>[] = [
      {},
      { 'x-csrf-token': 'forged' },
      { 'x-csrf-token': `${body.csrf_token}x` },
    ]
    for (const forged of forgeries) {
      const res = await post(forged)
      expect(res.statusCode).toBe(403)
      expect(res.json().error.code).toBe('invalid_csrf_token')
    }
    // Nothing was billed for the refused calls.
    expect(
      (await gw.app.inject({ method: 'GET', url: '/v1/generations', headers: { cookie } })).json().data,
    ).toEqual([])
    expect((await post({ 'x-csrf-token': body.csrf_token })).statusCode).toBe(200)

    // Another account's session's token does not fit this session.
    const other = await signIn(gw, 'sk-other-0123456789')
    expect((await post({ 'x-csrf-token': other.body.csrf_token })).statusCode).toBe(403)
  })

  it('a bearer key wins over the cookie, and a tampered cookie is refused', async () => {
    const gw = await gateway()
    const { cookie } = await signIn(gw, 'sk-acme-0123456789')
    const both = await gw.app.inject({
      method: 'GET',
      url: '/v1/account',
      headers: { cookie, authorization: 'Bearer sk-other-0123456789' },
    })
    expect(both.json().id).toBe('other')
    const [name, value] = cookie.split('=') as [string, string]
    const [payload, mac] = value.split('.') as [string, string]
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString())
    const forgedPayload = Buffer.from(JSON.stringify({ ...claims, account: 'other' })).toString('base64url')
    for (const forged of [
      `${name}=${forgedPayload}.${mac}`,
      `${name}=${payload}.${mac.slice(1)}`,
      `${name}=garbage`,
    ]) {
      const res = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie: forged } })
      expect(res.statusCode).toBe(401)
      expect(res.json().error.code).toBe('invalid_session')
    }
  })

  it('expires after its lifetime', async () => {
    const clock: Clock = { skew: 0, now: () => Date.now() + clock.skew }
    const gw = await gateway({}, clock)
    const { cookie } = await signIn(gw, 'sk-acme-0123456789')
    expect((await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })).statusCode).toBe(
      200,
    )
    clock.skew = 3_600_000
    const res = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })
    expect(res.statusCode).toBe(401)
    expect(res.json().error.code).toBe('session_expired')
  })

  it('ends when its key is revoked', async () => {
    const gw = await gateway()
    const { cookie } = await signIn(gw, 'sk-acme-0123456789')
    const admin = { authorization: `Bearer ${ADMIN}` }
    const keys = (
      await gw.app.inject({ method: 'GET', url: '/admin/accounts/acme/keys', headers: admin })
    ).json().data
    await gw.app.inject({ method: 'DELETE', url: `/admin/accounts/acme/keys/${keys[0].id}`, headers: admin })
    const res = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })
    expect(res.statusCode).toBe(401)
    expect(res.json().error.code).toBe('invalid_session')
  })

  it('the operator’s session reaches the admin API (CSRF on changes) and no account route; an account’s no admin route', async () => {
    const gw = await gateway()
    const op = await signIn(gw, ADMIN)
    expect(op.body).toMatchObject({ role: 'admin', account: null })
    const list = await gw.app.inject({
      method: 'GET',
      url: '/admin/accounts',
      headers: { cookie: op.cookie },
    })
    expect(list.json().data.map((a: { id: string }) => a.id)).toEqual(['acme', 'other'])
    const topUp = (headers: Record<string, string>) =>
      gw.app.inject({
        method: 'POST',
        url: '/admin/accounts/acme/credits',
        headers: { cookie: op.cookie, ...headers },
        payload: { amount: 5 },
      })
    expect((await topUp({ 'x-csrf-token': 'forged' })).statusCode).toBe(403)
    expect((await topUp({ 'x-csrf-token': op.body.csrf_token })).json()).toMatchObject({ total_credits: 15 })
    expect(
      (await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie: op.cookie } })).statusCode,
    ).toBe(401)

    const acme = await signIn(gw, 'sk-acme-0123456789')
    const refused = await gw.app.inject({
      method: 'GET',
      url: '/admin/accounts',
      headers: { cookie: acme.cookie },
    })
    expect(refused.statusCode).toBe(401)
    expect(refused.json().error.code).toBe('invalid_admin_key')
  })
})

describe('a console session and the key’s settings', () => {
  it('takes the key’s role: a management key’s session manages keys and calls no model; an inference key’s the reverse', async () => {
    const gw = await gateway()
    const admin = { authorization: `Bearer ${ADMIN}` }
    const made = await gw.app.inject({
      method: 'POST',
      url: '/admin/accounts/acme/keys',
      headers: admin,
      payload: { management: true },
    })
    const mgmt = await signIn(gw, made.json().key)
    expect(mgmt.body).toMatchObject({ role: 'account', management: true })
    const headers = { cookie: mgmt.cookie, 'x-csrf-token': mgmt.body.csrf_token }
    const created = await gw.app.inject({
      method: 'POST',
      url: '/v1/keys',
      headers,
      payload: { name: 'bot', limit: 1 },
    })
    expect(created.statusCode).toBe(201)
    const chat = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers,
      payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(chat.json().error.code).toBe('management_key_not_allowed')
    // Reads of the account's usage take any key.
    expect((await gw.app.inject({ method: 'GET', url: '/v1/activity', headers })).statusCode).toBe(200)

    const inference = await signIn(gw, 'sk-acme-0123456789')
    expect(inference.body.management).toBe(false)
    const list = await gw.app.inject({
      method: 'GET',
      url: '/v1/keys',
      headers: { cookie: inference.cookie },
    })
    expect(list.json().error.code).toBe('management_key_required')
  })

  it('a disabled or expired key cannot sign in (the same refusal), and disabling a key ends its sessions', async () => {
    const clock: Clock = { skew: 0, now: () => Date.now() + clock.skew }
    const gw = await gateway({}, clock)
    const admin = { authorization: `Bearer ${ADMIN}` }
    const make = async (payload: object) =>
      (
        await gw.app.inject({ method: 'POST', url: '/admin/accounts/acme/keys', headers: admin, payload })
      ).json()
    const soon = await make({ expires_at: new Date(Date.now() + 60_000).toISOString() })
    const live = await make({})
    const session = await signIn(gw, live.key)
    const other = await signIn(gw, soon.key)
    expect(other.res.statusCode).toBe(200)

    const mgmt = await make({ management: true })
    const m = await signIn(gw, mgmt.key)
    const patch = await gw.app.inject({
      method: 'PATCH',
      url: `/v1/keys/${live.hash}`,
      headers: { cookie: m.cookie, 'x-csrf-token': m.body.csrf_token },
      payload: { disabled: true },
    })
    expect(patch.statusCode).toBe(200)
    const res = await gw.app.inject({
      method: 'GET',
      url: '/v1/account',
      headers: { cookie: session.cookie },
    })
    expect(res.json().error.code).toBe('invalid_session')
    const again = await signIn(gw, live.key)
    expect(again.res.statusCode).toBe(401)
    expect(again.body.error).toMatchObject({ code: 'invalid_api_key', message: 'invalid key' })

    clock.skew = 120_000
    expect(
      (await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie: other.cookie } })).json()
        .error.code,
    ).toBe('invalid_session')
    expect((await signIn(gw, soon.key)).body.error).toMatchObject({
      code: 'invalid_api_key',
      message: 'invalid key',
    })
  })
})

describe('console sign-out', () => {
  it('needs the CSRF token, clears the cookie and revokes the token on every instance sharing the database', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-console-'))
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
    const env = { GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'j.db')}` }
    const a = await gateway(env)
    const b = await gateway(env)
    const { cookie, body } = await signIn(a, 'sk-acme-0123456789')
    // The other instance accepts the session: both derive the secret from the stored signing key.
    expect((await b.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })).statusCode).toBe(
      200,
    )

    const forged = await a.app.inject({
      method: 'DELETE',
      url: '/console/session',
      headers: { cookie, 'x-csrf-token': 'x' },
    })
    expect(forged.statusCode).toBe(403)
    const out = await a.app.inject({
      method: 'DELETE',
      url: '/console/session',
      headers: { cookie, 'x-csrf-token': body.csrf_token },
    })
    expect(out.statusCode).toBe(200)
    expect(String(out.headers['set-cookie'])).toMatch(
      /^junction_console=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict/,
    )
    for (const gw of [a, b]) {
      const res = await gw.app.inject({ method: 'GET', url: '/v1/account', headers: { cookie } })
      expect(res.statusCode).toBe(401)
      expect(res.json().error.code).toBe('invalid_session')
    }
  })
})

import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// Keys with limits, models, expiry and roles, through HTTP as a client sees them: the official
// OpenAI SDK for inference, plain fetch for the key API (OpenRouter's shapes). Upstream is a real
// HTTP server speaking OpenAI's wire format, so "nothing sent upstream" is counted, not assumed.

const ADMIN = 'admin-key-for-keys-tests-0123456789'
const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }
const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

// Every upstream answer reports 2 000 prompt and 2 000 completion tokens: at gpt-4o-mini's $0.15 and
// $0.60 per million, $0.0015 a request.
const PER_REQUEST = usd('0.0015')
const openaiAnswer = () => ({
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'gpt-4o-mini-2024-07-18',
  choices: [{ index: 0, message: { role: 'assistant', content: 'Foxes.' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 2000, completion_tokens: 2000, total_tokens: 4000 },
})

let fake: FakeUpstream | undefined
let gw: TestGateway | undefined
afterEach(async () => {
  await fake?.close()
  await gw?.close()
  fake = undefined
  gw = undefined
})

async function gateway(now?: () => number): Promise<{ gw: TestGateway; fake: FakeUpstream }> {
  fake = await startFakeUpstream({
    'POST /v1/chat/completions': (_req, res) => sendJson(res, 200, openaiAnswer()),
  })
  gw = await startGateway({
    env: {
      GATEWAY_ADMIN_KEY: ADMIN,
      OPENAI_API_KEY: 'sk-upstream-test',
      OPENAI_BASE_URL: `${fake.origin}/v1`,
    },
    listen: true,
    ...(now ? { overrides: { now } } : {}),
  })
  return { gw, fake }
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any

async function call(
  g: TestGateway,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
): Promise<{ status: number; body: Json }> {
  const res = await fetch(`${g.origin}${path}`, {
    method,
    headers: body === undefined ? { authorization: headers.authorization! } : headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await res.text()
  return { status: res.status, body: text === '' ? null : JSON.parse(text) }
}

/** An account with `credits` and a management key handed out by the operator. */
async function account(g: TestGateway, credits: number): Promise<{ id: string; management: string }> {
  const created = await call(g, 'POST', '/admin/accounts', admin, { credits })
  expect(created.status).toBe(201)
  const key = await call(g, 'POST', `/admin/accounts/${created.body.id}/keys`, admin, {
    name: 'ops',
    management: true,
  })
  expect(key.status).toBe(201)
  expect(key.body.data).toMatchObject({ name: 'ops', is_management_key: true })
  return { id: created.body.id, management: key.body.key }
}

/** A key the account makes for itself with its management key: its secret and hash. */
async function issue(
  g: TestGateway,
  management: string,
  body: Record<string, unknown>,
): Promise<{ key: string; hash: string; data: Json }> {
  const res = await call(g, 'POST', '/v1/keys', bearer(management), body)
  expect(res.status).toBe(201)
  return { key: res.body.key, hash: res.body.data.hash, data: res.body.data }
}

const sdk = (g: TestGateway, key: string) =>
  new OpenAI({ baseURL: `${g.origin}/v1`, apiKey: key, maxRetries: 0 })
const ask = (client: OpenAI, model = 'openai/gpt-4o-mini') =>
  client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: 'Tell me about foxes.' }],
    max_completion_tokens: 4000,
  })

/** The SDK's error for a refused call (status and code), or 'ok'. */
async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'ok'
  } catch (err) {
    if (err instanceof OpenAI.APIError) return `${err.status} ${String(err.code)}`
    throw err
  }
}

/** The sum of a key's records, read through the admin generations list filtered by the key. */
async function recordsOfKey(g: TestGateway, accountId: string, hash: string): Promise<bigint> {
  const page = await call(g, 'GET', `/admin/accounts/${accountId}/generations?limit=500&key=${hash}`, admin)
  expect(page.status).toBe(200)
  return (page.body.data as Json[]).reduce((sum: bigint, r: Json) => sum + usd(r.usage.cost), 0n)
}

describe('a key with a spending limit', () => {
  it('is admitted until its records sum to the limit, concurrent requests included, then refused with nothing sent upstream', async () => {
    const { gw: g, fake: up } = await gateway()
    const acct = await account(g, 10)
    const { key, hash, data } = await issue(g, acct.management, { name: 'ci', limit: 0.01 })
    expect(data).toMatchObject({
      name: 'ci',
      limit: 0.01,
      limit_remaining: 0.01,
      limit_reset: null,
      usage: 0,
    })
    const client = sdk(g, key)

    // Twenty at once: each holds its bound, so only some fit while the others are in flight.
    const first = await Promise.all(Array.from({ length: 20 }, () => outcome(ask(client))))
    expect(first.every((o) => o === 'ok' || o === '402 key_limit_exceeded')).toBe(true)
    expect(first).toContain('ok')
    // Then one at a time until refused.
    let more = 0
    while ((await outcome(ask(client))) === 'ok') more++
    const admitted = first.filter((o) => o === 'ok').length + more
    expect(up.requests).toHaveLength(admitted)

    // The records sum to the limit exactly: never past it (the last one is charged what was left).
    expect(await recordsOfKey(g, acct.id, hash)).toBe(usd('0.01'))
    // At least as many as fit whole; concurrent ones may share what was left (each charged its hold).
    expect(admitted).toBeGreaterThanOrEqual(Math.ceil(Number(usd('0.01')) / Number(PER_REQUEST)))
    expect(await outcome(ask(client))).toBe('402 key_limit_exceeded')
    expect(up.requests).toHaveLength(admitted)

    // The key sees its own state, in OpenRouter's shape.
    const me = await call(g, 'GET', '/v1/key', bearer(key))
    expect(me.body.data).toMatchObject({
      limit: 0.01,
      limit_remaining: 0,
      usage: 0.01,
      usage_daily: 0.01,
      is_management_key: false,
      label: expect.stringMatching(/^sk-jn-.{4}\.\.\.$/),
    })
    // The account still has credits: it is the key that is spent, and another key goes on.
    const other = await issue(g, acct.management, { name: 'other' })
    expect(await outcome(ask(sdk(g, other.key)))).toBe('ok')
  })

  it('a daily limit starts over at 00:00 UTC on the gateway’s clock', async () => {
    let now = Date.UTC(2026, 0, 5, 23, 58) // a Monday, two minutes before midnight
    const { gw: g } = await gateway(() => now)
    const acct = await account(g, 10)
    const { key } = await issue(g, acct.management, { limit: 0.003, limit_reset: 'daily' })
    const client = sdk(g, key)
    expect(await outcome(ask(client))).toBe('ok')
    expect(await outcome(ask(client))).toBe('ok')
    expect(await outcome(ask(client))).toBe('402 key_limit_exceeded')
    now = Date.UTC(2026, 0, 5, 23, 59, 59, 999)
    expect(await outcome(ask(client))).toBe('402 key_limit_exceeded')
    now = Date.UTC(2026, 0, 6) // midnight UTC: a new day
    expect((await call(g, 'GET', '/v1/key', bearer(key))).body.data).toMatchObject({
      limit_remaining: 0.003,
      usage_daily: 0,
      usage_weekly: 0.003,
      usage: 0.003,
    })
    expect(await outcome(ask(client))).toBe('ok')
  })

  it('the account’s balance and the key’s limit both apply', async () => {
    const { gw: g } = await gateway()
    const acct = await account(g, 0.004)
    const capped = await issue(g, acct.management, { limit: 0.002 })
    const open = await issue(g, acct.management, {})
    expect(await outcome(ask(sdk(g, capped.key)))).toBe('ok')
    expect(await outcome(ask(sdk(g, capped.key)))).toBe('ok')
    // The key's limit is reached first: $0.002 of the account's $0.004.
    expect(await outcome(ask(sdk(g, capped.key)))).toBe('402 key_limit_exceeded')
    expect(await outcome(ask(sdk(g, open.key)))).toBe('ok')
    expect(await outcome(ask(sdk(g, open.key)))).toBe('ok')
    // Now the balance is gone: every key is refused for it, the capped one too once its limit is raised.
    expect(await outcome(ask(sdk(g, open.key)))).toBe('402 insufficient_credits')
    await call(g, 'PATCH', `/v1/keys/${capped.hash}`, bearer(acct.management), { limit: 1 })
    expect(await outcome(ask(sdk(g, capped.key)))).toBe('402 insufficient_credits')
    const credits = await call(g, 'GET', '/v1/credits', bearer(acct.management))
    expect(credits.body.data.balance).toBe(0)
  })
})

describe('refusals at the door', () => {
  it('allowed_models refuses another model with 403 naming it, nothing sent upstream', async () => {
    const { gw: g, fake: up } = await gateway()
    const acct = await account(g, 10)
    const { key } = await issue(g, acct.management, { allowed_models: ['mock/*'] })
    const err = await ask(sdk(g, key)).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.PermissionDeniedError)
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('model_not_allowed')
    expect((err as Error).message).toContain('openai/gpt-4o-mini')
    expect(up.requests).toHaveLength(0)
    expect(await outcome(ask(sdk(g, key), 'mock/chat'))).toBe('ok')
  })

  it('an expired or disabled key is refused with 401', async () => {
    let now = Date.UTC(2026, 2, 1)
    const { gw: g, fake: up } = await gateway(() => now)
    const acct = await account(g, 10)
    const soon = await issue(g, acct.management, { expires_at: '2026-03-01T00:05:00Z' })
    expect(await outcome(ask(sdk(g, soon.key)))).toBe('ok')
    now = Date.UTC(2026, 2, 1, 0, 5)
    const err = await ask(sdk(g, soon.key)).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('key_expired')

    const off = await issue(g, acct.management, {})
    await call(g, 'PATCH', `/v1/keys/${off.hash}`, bearer(acct.management), { disabled: true })
    expect(await outcome(ask(sdk(g, off.key)))).toBe('401 key_disabled')
    expect(up.requests).toHaveLength(1)
    // A time in another offset than UTC is refused, as OpenRouter does.
    const bad = await call(g, 'POST', '/v1/keys', bearer(acct.management), {
      expires_at: '2026-03-01T01:00:00+01:00',
    })
    expect(bad.status).toBe(400)
    expect(bad.body.error.param).toBe('expires_at')
  })

  it('every inference route refuses the same way: chat, embeddings, predictions, Responses, Messages', async () => {
    const { gw: g } = await gateway()
    const acct = await account(g, 10)
    const spent = await issue(g, acct.management, { limit: 0 })
    const narrow = await issue(g, acct.management, { allowed_models: ['openai/*'] })
    const routes: [string, unknown][] = [
      ['/v1/chat/completions', { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/embeddings', { model: 'mock/embed', input: 'hi' }],
      ['/v1/predictions', { model: 'mock/image', input: { prompt: 'a fox' } }],
      ['/v1/responses', { model: 'mock/chat', input: 'hi' }],
      ['/v1/messages', { model: 'mock/chat', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }],
    ]
    for (const [path, body] of routes) {
      const limited = await call(g, 'POST', path, bearer(spent.key), body)
      expect([path, limited.status]).toEqual([path, 402])
      const wrong = await call(g, 'POST', path, bearer(narrow.key), body)
      expect([path, wrong.status]).toEqual([path, 403])
      // Anthropic's envelope for Messages, the gateway's for the rest; the message names the model.
      expect(JSON.stringify(wrong.body)).toContain('mock/')
      if (path !== '/v1/messages') {
        expect(limited.body.error.code).toBe('key_limit_exceeded')
        expect(wrong.body.error.code).toBe('model_not_allowed')
      }
    }
    // Nothing was billed or recorded.
    expect((await call(g, 'GET', '/v1/credits', bearer(acct.management))).body.data.total_usage).toBe(0)
    const records = await call(g, 'GET', `/admin/accounts/${acct.id}/generations`, admin)
    expect(records.body.data).toEqual([])
  })
})

describe('management keys and the account’s key API', () => {
  it('a management key manages its own account’s keys only and never calls a model', async () => {
    const { gw: g, fake: up } = await gateway()
    const a = await account(g, 10)
    const b = await account(g, 10)
    const mine = await issue(g, a.management, { name: 'mine', limit: 5, limit_reset: 'monthly' })
    const theirs = await issue(g, b.management, { name: 'theirs' })

    expect(await outcome(ask(sdk(g, a.management)))).toBe('403 management_key_not_allowed')
    expect(up.requests).toHaveLength(0)
    // Usage reads are open to it.
    expect((await call(g, 'GET', '/v1/credits', bearer(a.management))).status).toBe(200)

    const list = await call(g, 'GET', '/v1/keys', bearer(a.management))
    expect(list.status).toBe(200)
    expect(list.body.data.map((k: Json) => k.name).sort()).toEqual(['mine', 'ops'])
    expect(list.body.data.find((k: Json) => k.name === 'mine')).toMatchObject({
      hash: mine.hash,
      label: expect.any(String),
      disabled: false,
      limit: 5,
      limit_remaining: 5,
      limit_reset: 'monthly',
      usage: 0,
      usage_daily: 0,
      usage_weekly: 0,
      usage_monthly: 0,
      created_at: expect.stringMatching(/Z$/),
      updated_at: null,
      expires_at: null,
    })
    expect(JSON.stringify(list.body)).not.toContain(mine.key)

    // Another account's key is unknown: get, change, delete.
    for (const method of ['GET', 'DELETE']) {
      const res = await call(g, method, `/v1/keys/${theirs.hash}`, bearer(a.management))
      expect([method, res.status, res.body.error.code]).toEqual([method, 404, 'key_not_found'])
    }
    const patch = await call(g, 'PATCH', `/v1/keys/${theirs.hash}`, bearer(a.management), { disabled: true })
    expect(patch.status).toBe(404)
    expect(await outcome(ask(sdk(g, theirs.key), 'mock/chat'))).toBe('ok')

    // An inference key may not manage keys, but reads itself.
    const denied = await call(g, 'GET', '/v1/keys', bearer(mine.key))
    expect([denied.status, denied.body.error.code]).toEqual([403, 'management_key_required'])
    expect((await call(g, 'GET', '/v1/key', bearer(mine.key))).body.data.limit).toBe(5)

    // Changed, then deleted: the key stops working at once.
    const changed = await call(g, 'PATCH', `/v1/keys/${mine.hash}`, bearer(a.management), {
      name: 'renamed',
      allowed_models: ['mock/chat'],
      rate_limits: { requests_per_minute: 2 },
    })
    expect(changed.body.data).toMatchObject({
      name: 'renamed',
      allowed_models: ['mock/chat'],
      rate_limits: { requests_per_minute: 2, tokens_per_minute: null },
      updated_at: expect.stringMatching(/Z$/),
    })
    // Its own requests-per-minute limit, on top of the account's.
    const client = sdk(g, mine.key)
    expect(await outcome(ask(client, 'mock/chat'))).toBe('ok')
    expect(await outcome(ask(client, 'mock/chat'))).toBe('ok')
    expect(await outcome(ask(client, 'mock/chat'))).toBe('429 rate_limit_exceeded')
    expect((await call(g, 'DELETE', `/v1/keys/${mine.hash}`, bearer(a.management))).body).toEqual({
      deleted: true,
    })
    expect(await outcome(ask(client, 'mock/chat'))).toBe('401 invalid_api_key')
  })

  it('records name their key: /v1/generation shows it and the admin list filters by it', async () => {
    const { gw: g } = await gateway()
    const acct = await account(g, 10)
    const one = await issue(g, acct.management, {})
    const two = await issue(g, acct.management, {})
    const made = await sdk(g, one.key).chat.completions.create({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'hi' }],
    })
    await ask(sdk(g, two.key), 'mock/chat')
    const rec = await call(g, 'GET', `/v1/generation?id=${made.id}`, bearer(one.key))
    expect(rec.body.key_hash).toBe(one.hash)
    expect(JSON.stringify(rec.body)).not.toContain(one.key)
    const filtered = await call(g, 'GET', `/admin/accounts/${acct.id}/generations?key=${one.hash}`, admin)
    expect(filtered.body.data.map((r: Json) => r.generationId)).toEqual([made.id])
    const usage = await call(g, 'GET', `/v1/keys/${one.hash}`, bearer(acct.management))
    expect(usage.body.data.usage).toBe(rec.body.usage.cost)
  })
})

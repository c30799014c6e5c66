import { afterEach, describe, expect, it, vi } from 'vitest'
import { readJsonFixture } from '../support/fixtures.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw, type RawConnection } from '../support/raw-http.ts'

// One tenant must not be able to starve another through the HTTP edge: admission (key, account,
// requests per minute, a balance above zero) is decided before a body is read, each account holds
// at most its share of the bytes of bodies still arriving, and a body slower than the rate floor is
// cut. Raw sockets play the slow clients; account b is the victim that must keep getting answers.

const CHAT = 'openai/gpt-4o-mini'
const hello = { model: CHAT, messages: [{ role: 'user', content: 'hello' }] }
const auth = (key: string) => ({ authorization: `Bearer ${key}` })

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

interface Setup {
  fake: FakeUpstream
  gw: TestGateway
}

const accounts = [
  // a: a key with almost nothing left, the one that misbehaves.
  { id: 'a', keys: ['sk-tenant-a'], credits: 0.0005 },
  { id: 'b', keys: ['sk-tenant-b'], credits: 10 },
  { id: 'broke', keys: ['sk-broke'], credits: 0 },
  { id: 'limited', keys: ['sk-limited'], credits: 10, rateLimits: { requestsPerMinute: 2 } },
]

async function setup(server: Record<string, number> = {}): Promise<Setup> {
  const fake = await startFakeUpstream({
    'POST /v1/chat/completions': (_req, res) =>
      sendJson(res, 200, readJsonFixture('openai-compat/completion.json')),
  })
  const gw = await startGateway({
    env: { OPENAI_API_KEY: 'sk-upstream-test', OPENAI_BASE_URL: `${fake.origin}/v1` },
    file: { server, accounts },
    listen: true,
  })
  cleanups.push(
    () => gw.close(),
    () => fake.close(),
  )
  return { fake, gw }
}

async function raw(gw: TestGateway): Promise<RawConnection> {
  const c = await openRaw(gw.origin)
  cleanups.push(async () => void c.socket.destroy())
  return c
}

const jsonHead = (path: string, length: number, key: string): string =>
  head(`POST ${path} HTTP/1.1`, {
    ...auth(key),
    'content-type': 'application/json',
    'content-length': length,
  })

function post(gw: TestGateway, path: string, key: string, body: unknown): Promise<Response> {
  return fetch(`${gw.origin}${path}`, {
    method: 'POST',
    headers: { ...auth(key), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}

describe('admission before the body', () => {
  it.each([
    ['/v1/chat/completions'],
    ['/routed/v1/chat/completions'],
    ['/v1/embeddings'],
    ['/v1/predictions'],
  ])('%s: an account with no credits left is 402 before its body arrives', async (path) => {
    // The body is announced and never sent: only an answer decided before reading it can come.
    const { gw, fake } = await setup({ bodyIdleTimeoutMs: 60_000 })
    const c = await raw(gw)
    await c.send(jsonHead(path, 1_000_000, 'sk-broke') + '{"model":')
    const res = await c.response()
    expect(res.status).toBe(402)
    expect(JSON.parse(res.body).error.code).toBe('insufficient_credits')
    expect(res.headers.connection).toBe('close')
    await c.closed
    expect(fake.requests).toHaveLength(0)
    expect(gw.app.bodyBudget.held).toBe(0)
  })

  it('the requests-per-minute limit refuses with 429 before the body, and counts each request once', async () => {
    const { gw, fake } = await setup({ bodyIdleTimeoutMs: 60_000 })
    // A limit of 2: two whole requests pass (a request counted twice would make the second a 429).
    const first = await post(gw, '/v1/chat/completions', 'sk-limited', hello)
    expect(first.status).toBe(200)
    expect(first.headers.get('x-ratelimit-remaining')).toBe('1')
    const second = await post(gw, '/v1/chat/completions', 'sk-limited', hello)
    expect(second.status).toBe(200)
    expect(second.headers.get('x-ratelimit-remaining')).toBe('0')
    expect(fake.requests).toHaveLength(2)

    const c = await raw(gw)
    await c.send(jsonHead('/v1/chat/completions', 1_000_000, 'sk-limited') + '{"model":')
    const res = await c.response()
    expect(res.status).toBe(429)
    expect(JSON.parse(res.body).error.code).toBe('rate_limit_exceeded')
    expect(res.headers['x-ratelimit-scope']).toBe('account-requests')
    await c.closed
    expect(fake.requests).toHaveLength(2)
  })
})

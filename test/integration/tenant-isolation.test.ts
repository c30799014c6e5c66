import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { readJsonFixture } from '../support/fixtures.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw, type RawConnection, type RawResponse } from '../support/raw-http.ts'

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
    'POST /v1/embeddings': (_req, res) =>
      sendJson(res, 200, {
        object: 'list',
        data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }],
        model: 'text-embedding-3-small',
        usage: { prompt_tokens: 2, total_tokens: 2 },
      }),
  })
  const outputs = await mkdtemp(join(tmpdir(), 'junction-tenants-'))
  cleanups.push(() => rm(outputs, { recursive: true, force: true }))
  const gw = await startGateway({
    env: {
      OPENAI_API_KEY: 'sk-upstream-test',
      OPENAI_BASE_URL: `${fake.origin}/v1`,
      GATEWAY_OUTPUTS_DIR: outputs,
      GATEWAY_FILES_DIR: outputs,
    },
    file: { server, accounts },
    // No task runner: a prediction's creation is what is tested here.
    overrides: { background: false },
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

describe('slow bodies of one account', () => {
  /** Opens a body announced as 100 KB, sends `first` bytes of it, then one byte every 30 ms. */
  async function slowBody(gw: TestGateway, key: string, first: number): Promise<RawConnection> {
    const c = await raw(gw)
    await c.send(jsonHead('/v1/chat/completions', 100_000, key) + `{"model":"${'m'.repeat(first - 10)}`)
    void (async () => {
      while (!c.socket.destroyed && c.socket.writable) {
        await new Promise((r) => setTimeout(r, 30))
        await c.send('m')
      }
    })()
    return c
  }

  it("fill only the account's share of the body budget, other accounts get answers, and are cut at the rate floor", async () => {
    const { gw, fake } = await setup({
      maxBufferedBodyBytes: 4_000,
      maxBufferedBodyBytesPerAccount: 1_000,
      // 1000 B/s over 1 s; the trickle (~33 B/s) is far below it, whatever the machine's speed.
      bodyMinBytesPerSecond: 1_000,
      bodyRateWindowMs: 1_000,
      bodyIdleTimeoutMs: 60_000,
    })
    // a opens ten slow bodies of 450 bytes: without a share, 8 would hold nearly the whole 4000.
    const slow = await Promise.all(Array.from({ length: 10 }, () => slowBody(gw, 'sk-tenant-a', 450)))
    const early: RawResponse[] = []
    const answered = slow.map((c) => c.response().then((r) => (early.push(r), r)))
    // Those past a's share are refused at once (its own limit, not the gateway's); two are held.
    await vi.waitFor(() => expect(early.length).toBe(8))
    const refused = early.filter((r) => r.status === 429)
    expect(refused).toHaveLength(8)
    expect(gw.app.bodyBudget.heldBy('a')).toBeGreaterThanOrEqual(900)
    for (const r of refused) {
      expect(JSON.parse(r.body).error.code).toBe('rate_limit_exceeded')
      expect(r.headers['x-ratelimit-scope']).toBe('account-bodies')
    }
    expect(gw.app.bodyBudget.heldBy('a')).toBeLessThanOrEqual(1_000)

    // b's posts still fit while a holds its share. (The held ones are cut at the floor below.)
    const [chat, embeddings, prediction] = await Promise.all([
      post(gw, '/v1/chat/completions', 'sk-tenant-b', hello),
      post(gw, '/v1/embeddings', 'sk-tenant-b', { model: 'openai/text-embedding-3-small', input: 'hi' }),
      post(gw, '/v1/predictions', 'sk-tenant-b', { model: 'mock/image', input: { prompt: 'a fox' } }),
    ])
    expect([chat.status, embeddings.status, prediction.status]).toEqual([200, 200, 200])

    // a's bodies that were let in are cut at the rate floor with 408, not after 60 s of idling.
    const answers = await Promise.all(answered)
    const cut = answers.filter((r) => r.status !== 429)
    expect(cut).toHaveLength(2)
    for (const r of cut) {
      expect(r.status).toBe(408)
      const body = JSON.parse(r.body)
      expect(body.error.code).toBe('request_timeout')
      expect(body.error.message).toContain('slower than 1000 bytes per second')
      expect(body.request_id).toBe(r.headers['x-request-id'])
    }
    await Promise.all(slow.map((c) => c.closed))
    await vi.waitFor(() => expect(gw.app.bodyBudget.held).toBe(0))
    expect(fake.requests.filter((r) => r.url.includes('chat'))).toHaveLength(1)
  })

  it('an account holding its whole share is refused before any byte of its next body', async () => {
    const { gw } = await setup({
      maxBufferedBodyBytes: 4_000,
      maxBufferedBodyBytesPerAccount: 1_000,
      bodyMinBytesPerSecond: 0,
      bodyIdleTimeoutMs: 60_000,
    })
    const holder = await raw(gw)
    await holder.send(
      jsonHead('/v1/chat/completions', 100_000, 'sk-tenant-a') + `{"model":"${'m'.repeat(990)}`,
    )
    await vi.waitFor(() => expect(gw.app.bodyBudget.heldBy('a')).toBe(1_000))
    const next = await raw(gw)
    await next.send(jsonHead('/v1/chat/completions', 100, 'sk-tenant-a'))
    const res = await next.response()
    expect(res.status).toBe(429)
    expect(JSON.parse(res.body).error.code).toBe('rate_limit_exceeded')
    expect(res.headers['x-ratelimit-scope']).toBe('account-bodies')
    // b is not concerned.
    expect((await post(gw, '/v1/chat/completions', 'sk-tenant-b', hello)).status).toBe(200)
  })
})

describe('connections per client address', () => {
  it('past server.maxConnectionsPerAddress a new connection is closed unread; other addresses are not concerned', async () => {
    const { gw, fake } = await setup({ maxConnectionsPerAddress: 2 })
    const open = (from: string): Promise<RawConnection> =>
      openRaw(gw.origin, from).then((c) => (cleanups.push(async () => void c.socket.destroy()), c))
    const chat = JSON.stringify(hello)
    const request = (key: string) =>
      jsonHead('/v1/chat/completions', Buffer.byteLength(chat), key).replace(
        '\r\n\r\n',
        '\r\nconnection: keep-alive\r\n\r\n',
      ) + chat

    // Two connections of 127.0.0.2 are served and kept open.
    const held = [await open('127.0.0.2'), await open('127.0.0.2')]
    for (const c of held) {
      await c.send(request('sk-tenant-a'))
      expect((await c.response()).status).toBe(200)
    }
    expect(gw.app.connectionsByAddress.count(held[0]!.socket.localAddress!)).toBe(2)

    // A third is closed as soon as it is accepted: no answer, nothing read, nothing sent upstream.
    const third = await open('127.0.0.2')
    await third.send(request('sk-tenant-a'))
    await third.closed
    await expect(third.response()).rejects.toThrow('connection closed before a whole response')

    // Another address is not concerned.
    const other = await open('127.0.0.1')
    await other.send(request('sk-tenant-b'))
    expect((await other.response()).status).toBe(200)

    // Once one of 127.0.0.2's closes, it may connect again.
    held[0]!.socket.destroy()
    await vi.waitFor(() => expect(gw.app.connectionsByAddress.count('127.0.0.2')).toBe(1))
    const again = await open('127.0.0.2')
    await again.send(request('sk-tenant-a'))
    expect((await again.response()).status).toBe(200)
    expect(fake.requests.filter((r) => r.url.includes('chat'))).toHaveLength(4)
  })
})

import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { readJsonFixture } from '../support/fixtures.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw, type RawConnection, type RawResponse } from '../support/raw-http.ts'

// The HTTP edge of a listening gateway: what Node and Fastify answer before a route runs (malformed
// requests, timeouts, long URLs), slow and refused bodies, and JSON nesting. Raw sockets send what no
// HTTP client would, and show whether the gateway closed the connection.

const CHAT = 'openai/gpt-4o-mini'
const hello = { model: CHAT, messages: [{ role: 'user', content: 'hello' }] }

interface Setup {
  fake: FakeUpstream
  gw: TestGateway
}

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

/** A listening gateway whose `openai` provider is a fake that records every request. */
async function setup(server: Record<string, number> = {}, env: Record<string, string> = {}): Promise<Setup> {
  const fake = await startFakeUpstream({
    'POST /v1/chat/completions': (_req, res) =>
      sendJson(res, 200, readJsonFixture('openai-compat/completion.json')),
  })
  const gw = await startGateway({
    env: { OPENAI_API_KEY: 'sk-upstream-test', OPENAI_BASE_URL: `${fake.origin}/v1`, ...env },
    file: { server },
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

const jsonHead = (length: number, headers: Record<string, string> = devAuth): string =>
  head('POST /v1/chat/completions HTTP/1.1', {
    ...headers,
    'content-type': 'application/json',
    'content-length': length,
  })

/** The envelope, exactly: no Fastify `statusCode`/`error` fields besides it. */
function expectEnvelope(res: RawResponse | { status: number; body: string }, status: number, code: string) {
  expect(res.status).toBe(status)
  const body = JSON.parse(res.body)
  expect(Object.keys(body).filter((k) => k !== 'request_id')).toEqual(['error'])
  expect(body.error).toEqual({
    message: expect.any(String),
    type: expect.any(String),
    code,
    param: body.error.param,
  })
  expect(body.error.message.length).toBeGreaterThan(10)
  return body as {
    error: { message: string; type: string; code: string; param: string | null }
    request_id?: string
  }
}

describe("Node's and Fastify's own refusals use the error envelope", () => {
  it('a path parameter over the length limit is 414 uri_too_long', async () => {
    const { gw } = await setup()
    const res = await fetch(`${gw.origin}/v1/files/${'f'.repeat(200)}`, { headers: devAuth })
    const body = expectEnvelope({ status: res.status, body: await res.text() }, 414, 'uri_too_long')
    expect(body.error.type).toBe('invalid_request_error')
    expect(body.request_id).toBe(res.headers.get('x-request-id'))
  })

  it('a URL that does not decode is 400 invalid_request', async () => {
    const { gw } = await setup()
    const c = await raw(gw)
    await c.send(head('GET /v1/files/%C0%AE%C0%AE%2F HTTP/1.1', devAuth))
    const res = await c.response()
    const body = expectEnvelope(res, 400, 'invalid_request')
    expect(res.headers['x-request-id']).toBe(body.request_id)
  })

  it('a malformed request line is 400 invalid_request, and the connection is closed', async () => {
    const { gw } = await setup()
    const c = await raw(gw)
    await c.send('HELLO THERE\r\n\r\n')
    const res = await c.response()
    expectEnvelope(res, 400, 'invalid_request')
    expect(res.headers.connection).toBe('close')
    await c.closed
  })

  it('headers over 16 KB are 431 headers_too_large', async () => {
    const { gw } = await setup()
    const c = await raw(gw)
    await c.send(head('GET /healthz HTTP/1.1', { 'x-big': 'a'.repeat(17 * 1024) }))
    const res = await c.response()
    expectEnvelope(res, 431, 'headers_too_large')
    await c.closed
  })

  it('headers that never end are cut at headersTimeoutMs with 408 request_timeout', async () => {
    const { gw } = await setup({ headersTimeoutMs: 100 })
    const c = await raw(gw)
    await c.send('GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n')
    const res = await c.response()
    expectEnvelope(res, 408, 'request_timeout')
    expect(res.headers.connection).toBe('close')
    await c.closed
  })
})

describe('slow and refused bodies', () => {
  it('a request refused before its body is read is answered and its connection closed', async () => {
    const { gw, fake } = await setup()
    const c = await raw(gw)
    // No key, and a body announced as 1 GB that arrives a byte at a time.
    await c.send(jsonHead(1e9, {}) + '{')
    const res = await c.response()
    expectEnvelope(res, 401, 'missing_api_key')
    expect(res.headers.connection).toBe('close')
    await c.send('"')
    await c.closed
    expect(fake.requests).toHaveLength(0)
  })

  it('a body over the limit announced by content-length is 413 and the connection is closed', async () => {
    const { gw } = await setup({}, { GATEWAY_BODY_LIMIT_BYTES: '1000' })
    const c = await raw(gw)
    await c.send(jsonHead(5000) + '{"model":')
    const res = await c.response()
    expectEnvelope(res, 413, 'payload_too_large')
    await c.closed
  })

  it('keeps the connection open after an error answered once the whole body was read', async () => {
    const { gw } = await setup()
    const c = await raw(gw)
    const text = JSON.stringify({ ...hello, messages: [{ role: 'bot', content: 'hi' }] })
    await c.send(jsonHead(Buffer.byteLength(text)) + text)
    const res = await c.response()
    expectEnvelope(res, 400, 'invalid_value')
    expect(res.headers.connection).toBe('keep-alive')
    await c.send(head('GET /healthz HTTP/1.1'))
    expect((await c.response()).status).toBe(200)
  })

  it('a JSON body that stalls is cut after bodyIdleTimeoutMs with 408, before any upstream call', async () => {
    const { gw, fake } = await setup({ bodyIdleTimeoutMs: 100 })
    const c = await raw(gw)
    await c.send(jsonHead(1000) + '{"model":"openai/')
    const res = await c.response()
    const body = expectEnvelope(res, 408, 'request_timeout')
    expect(res.headers['x-request-id']).toBe(body.request_id)
    expect(res.headers.connection).toBe('close')
    await c.closed
    expect(fake.requests).toHaveLength(0)
    await vi.waitFor(() => expect(gw.app.bodyBudget.held).toBe(0))
  })

  it('an upload that stalls is cut after bodyIdleTimeoutMs with 408, and nothing is kept', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'junction-edge-'))
    cleanups.push(() => rm(dir, { recursive: true, force: true }))
    const { gw } = await setup({ bodyIdleTimeoutMs: 100 }, { GATEWAY_FILES_DIR: dir })
    const c = await raw(gw)
    const boundary = 'edge-boundary'
    await c.send(
      head('POST /v1/files HTTP/1.1', {
        ...devAuth,
        'content-type': `multipart/form-data; boundary=${boundary}`,
        'content-length': 1_000_000,
      }) +
        `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.bin"\r\n\r\n` +
        'x'.repeat(1000),
    )
    const res = await c.response()
    expectEnvelope(res, 408, 'request_timeout')
    await c.closed
    const list = await fetch(`${gw.origin}/v1/files`, { headers: devAuth })
    expect(((await list.json()) as { data: unknown[] }).data).toEqual([])
    // The partial upload's temporary file goes once the route sees the connection close.
    await vi.waitFor(async () => expect(await readdir(dir)).toEqual([]))
  })

  it('a body that keeps trickling is cut at requestTimeoutMs with 408', async () => {
    const { gw, fake } = await setup({
      requestTimeoutMs: 200,
      headersTimeoutMs: 200,
      bodyIdleTimeoutMs: 60_000,
    })
    const c = await raw(gw)
    await c.send(jsonHead(1_000_000) + '{"model":"x","padding":"')
    // One byte every 10 ms: never idle, never done.
    let sending = true
    void (async () => {
      while (sending && !c.socket.destroyed) {
        await c.send('a')
        await new Promise((r) => setTimeout(r, 10))
      }
    })()
    const res = await c.response().finally(() => (sending = false))
    expectEnvelope(res, 408, 'request_timeout')
    await c.closed
    expect(fake.requests).toHaveLength(0)
  })

  it('refuses new body bytes with 503 server_busy once maxBufferedBodyBytes are held, and recovers', async () => {
    const { gw, fake } = await setup({ maxBufferedBodyBytes: 1000 })
    // One client holds 800 bytes of an unfinished body.
    const holder = await raw(gw)
    await holder.send(jsonHead(5000) + `{"model":"${'m'.repeat(790)}`)
    // The gateway counts bytes as they arrive: no event tells the test, so it polls the figure.
    await vi.waitFor(() => expect(gw.app.bodyBudget.held).toBe(800))

    const payload = JSON.stringify({ ...hello, user: 'u'.repeat(300) })
    const refused = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: payload,
    })
    const body = expectEnvelope({ status: refused.status, body: await refused.text() }, 503, 'server_busy')
    expect(body.error.type).toBe('service_unavailable')
    expect(refused.headers.get('retry-after')).toBe('1')
    expect(fake.requests).toHaveLength(0)
    expect(gw.app.bodyBudget.held).toBe(800)

    // A body over the whole bound alone is refused too.
    const alone = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: JSON.stringify({ ...hello, user: 'u'.repeat(1500) }),
    })
    expect(alone.status).toBe(503)

    // The holder leaves: its bytes are released and the same request goes through.
    holder.socket.destroy()
    await vi.waitFor(() => expect(gw.app.bodyBudget.held).toBe(0))
    const ok = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: payload,
    })
    expect(ok.status).toBe(200)
    expect(fake.requests).toHaveLength(1)
    expect(gw.app.bodyBudget.held).toBe(0)
  })
})

describe('JSON nesting', () => {
  /** `{"type":"object","properties":{"a": …}}`, `depth` schemas deep, built without recursion. */
  function deepSchema(depth: number): string {
    return '{"type":"object","properties":{"a":'.repeat(depth) + '{"type":"string"}' + '}}'.repeat(depth)
  }

  async function post(gw: TestGateway, text: string): Promise<{ status: number; body: string }> {
    const res = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: text,
    })
    return { status: res.status, body: await res.text() }
  }

  const helloFields = JSON.stringify(hello).slice(1, -1)

  it('10,000 levels in a tool schema are 400 too_deep naming the place, and nothing goes upstream', async () => {
    const { gw, fake } = await setup()
    const text = `{${helloFields},"tools":[{"type":"function","function":{"name":"f","parameters":${deepSchema(10_000)}}}]}`
    const body = expectEnvelope(await post(gw, text), 400, 'too_deep')
    expect(body.error.param).toBe('tools[0].function.parameters.properties.a.properties.a.…')
    expect(body.error.message).toContain('64')
    expect(fake.requests).toHaveLength(0)
  })

  it('10,000 levels in response_format are 400 too_deep', async () => {
    const { gw, fake } = await setup()
    const text = `{${helloFields},"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${deepSchema(10_000)}}}}`
    const body = expectEnvelope(await post(gw, text), 400, 'too_deep')
    expect(body.error.param).toBe('response_format.json_schema.schema.properties.a.properties.a.properties.…')
    expect(fake.requests).toHaveLength(0)
  })

  it('10,000 levels in an unknown top-level field are 400 too_deep, not forwarded', async () => {
    const { gw, fake } = await setup()
    const text = `{${helloFields},"extra":${'['.repeat(10_000)}${']'.repeat(10_000)}}`
    const body = expectEnvelope(await post(gw, text), 400, 'too_deep')
    expect(body.error.param).toBe('extra[0][0][0][0][0][0][0].…')
    expect(fake.requests).toHaveLength(0)
  })

  it('a million opening brackets are 400 too_deep, balanced or not', async () => {
    const { gw } = await setup()
    expectEnvelope(await post(gw, '['.repeat(1_000_000) + ']'.repeat(1_000_000)), 400, 'too_deep')
    expectEnvelope(await post(gw, '['.repeat(1_000_000)), 400, 'too_deep')
    // The gateway is still serving.
    expect((await post(gw, JSON.stringify(hello))).status).toBe(200)
  })

  it('takes exactly maxJsonDepth levels and refuses one more', async () => {
    const { gw, fake } = await setup({ maxJsonDepth: 8 })
    // The body is level 1, "extra" level 2, then 6 more arrays: 8 levels.
    const atLimit = `{${helloFields},"extra":${'['.repeat(7)}${']'.repeat(7)}}`
    expect((await post(gw, atLimit)).status).toBe(200)
    expect(fake.requests[0]!.body).toMatchObject({ extra: [[[[[[[]]]]]]] })
    const over = `{${helloFields},"extra":${'['.repeat(8)}${']'.repeat(8)}}`
    const body = expectEnvelope(await post(gw, over), 400, 'too_deep')
    expect(body.error.param).toBe('extra[0][0][0][0][0][0][0]')
    expect(fake.requests).toHaveLength(1)
  })

  it('refuses a __proto__ key (prototype poisoning) with 400 naming it', async () => {
    const { gw, fake } = await setup()
    const text = `{${helloFields},"metadata":{"__proto__":{"admin":true}}}`
    const body = expectEnvelope(await post(gw, text), 400, 'invalid_value')
    expect(body.error.param).toBe('metadata.__proto__')
    expect(fake.requests).toHaveLength(0)
  })

  it('keeps the invalid JSON and empty body answers', async () => {
    const { gw } = await setup()
    const bad = expectEnvelope(await post(gw, '{"model":'), 400, 'invalid_json')
    expect(bad.error.message).toBe('request body is not valid JSON')
    const empty = expectEnvelope(await post(gw, ''), 400, 'invalid_json')
    expect(empty.error.message).toBe('request body is empty but content-type is application/json')
  })
})

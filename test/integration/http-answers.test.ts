import type { ServerResponse } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { sendJson, startFakeUpstream } from '../support/fake-upstream.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw, type RawConnection } from '../support/raw-http.ts'

// What every answer carries, whoever writes it: 405 with Allow for a known path and another method,
// a request_id on the answers Node's clientError path writes raw on the socket, and the deployment
// headers on an error answer once a deployment was tried.

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function gateway(options: Parameters<typeof startGateway>[0] = {}): Promise<TestGateway> {
  const gw = await startGateway({ ...options, listen: true })
  cleanups.push(() => gw.close())
  return gw
}

async function raw(gw: TestGateway): Promise<RawConnection> {
  const c = await openRaw(gw.origin)
  cleanups.push(async () => void c.socket.destroy())
  return c
}

describe('405 method_not_allowed', () => {
  it.each([
    ['GET', '/v1/chat/completions', 'POST'],
    ['DELETE', '/v1/embeddings', 'POST'],
    ['PUT', '/v1/models', 'GET, HEAD'],
    ['POST', '/v1/files/file-abc', 'GET, HEAD, DELETE'],
    ['PATCH', '/healthz', 'GET, HEAD'],
  ])('%s %s is 405 with Allow: %s', async (method, path, allow) => {
    const gw = await gateway()
    const res = await fetch(`${gw.origin}${path}?x=1`, { method, headers: devAuth })
    expect(res.status).toBe(405)
    expect(res.headers.get('allow')).toBe(allow)
    const body = (await res.json()) as {
      error: { code: string; type: string; message: string }
      request_id: string
    }
    expect(body.error).toMatchObject({ code: 'method_not_allowed', type: 'invalid_request_error' })
    expect(body.error.message).toContain(allow)
    expect(body.request_id).toBe(res.headers.get('x-request-id'))
  })

  it('an unknown path is still 404 route_not_found', async () => {
    const gw = await gateway()
    const res = await fetch(`${gw.origin}/v1/nothing-here`, { method: 'POST', headers: devAuth })
    expect(res.status).toBe(404)
    expect(res.headers.get('allow')).toBeNull()
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('route_not_found')
  })
})

describe('answers written raw on the socket carry a request_id', () => {
  it.each([
    ['a malformed request line', 'HELLO THERE\r\n\r\n', 400],
    ['headers over 16 KB', head('GET /healthz HTTP/1.1', { 'x-big': 'a'.repeat(17 * 1024) }), 431],
  ])('%s: %i with request_id and x-request-id', async (_name, text, status) => {
    const gw = await gateway()
    const c = await raw(gw)
    await c.send(text)
    const res = await c.response()
    expect(res.status).toBe(status)
    const body = JSON.parse(res.body) as { request_id?: string }
    expect(body.request_id).toMatch(/^[0-9a-f]{32}$/)
    expect(res.headers['x-request-id']).toBe(body.request_id)
  })

  it('headers that never end: 408 with request_id', async () => {
    const gw = await gateway({ file: { server: { headersTimeoutMs: 100 } } })
    const c = await raw(gw)
    await c.send('GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n')
    const res = await c.response()
    expect(res.status).toBe(408)
    expect((JSON.parse(res.body) as { request_id?: string }).request_id).toMatch(/^[0-9a-f]{32}$/)
  })
})

describe('deployment headers on error answers', () => {
  it.each([
    ['/v1/chat/completions', { model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }],
    ['/v1/embeddings', { model: 'openai/text-embedding-3-small', input: 'hi' }],
  ])(
    '%s: a 502 after every attempt failed names the deployment tried and the attempts',
    async (path, body) => {
      const fail = (_req: unknown, res: ServerResponse) =>
        sendJson(res, 500, { error: { message: 'boom', type: 'server_error' } })
      const fake = await startFakeUpstream({ 'POST /v1/chat/completions': fail, 'POST /v1/embeddings': fail })
      cleanups.push(() => fake.close())
      const gw = await gateway({
        env: { OPENAI_API_KEY: 'sk-upstream-test', OPENAI_BASE_URL: `${fake.origin}/v1` },
      })
      const res = await fetch(`${gw.origin}${path}`, {
        method: 'POST',
        headers: { ...devAuth, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
      expect(res.status).toBeGreaterThanOrEqual(500)
      expect(res.headers.get('x-junction-provider')).toBe('openai')
      expect(res.headers.get('x-junction-deployment')).toEqual(expect.any(String))
      expect(Number(res.headers.get('x-junction-attempts'))).toBe(fake.requests.length)
      expect(fake.requests.length).toBeGreaterThanOrEqual(1)
      expect(res.headers.get('x-generation-id')).toEqual(expect.any(String))
    },
  )

  it('a request refused before any upstream call has none', async () => {
    const gw = await gateway()
    const res = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock/chat', messages: [] }),
    })
    expect(res.status).toBe(400)
    expect(res.headers.get('x-junction-provider')).toBeNull()
  })
})

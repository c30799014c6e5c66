import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/config.ts'
import { allowHeadersFor } from '../../src/http/cors.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// CORS: off by default; server.cors.allowedOrigins answers preflights under /v1 and /routed/v1 and
// lets an allowed page read the answers and their id and rate-limit headers.

const page = 'http://localhost:5173'

const preflight = (gw: TestGateway, url: string, headers: Record<string, string>) =>
  gw.app.inject({ method: 'OPTIONS', url, headers })

const sdkHeaders =
  'authorization, content-type, x-stainless-os, x-stainless-retry-count, openai-organization, idempotency-key'

describe('CORS off (the default)', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  it('a preflight is 405 (the path takes POST) and answers carry no Access-Control header', async () => {
    const pre = await preflight(gw, '/v1/chat/completions', {
      origin: page,
      'access-control-request-method': 'POST',
    })
    expect(pre.statusCode).toBe(405)
    expect(pre.headers['allow']).toBe('POST')
    expect(pre.headers['access-control-allow-origin']).toBeUndefined()
    const res = await gw.app.inject({ url: '/v1/models', headers: { ...devAuth, origin: page } })
    expect(res.statusCode).toBe(200)
    expect(Object.keys(res.headers).filter((h) => h.startsWith('access-control-'))).toEqual([])
  })
})

describe('CORS with exact origins', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({
      file: {
        server: { cors: { allowedOrigins: [page, 'https://app.example.com'] } },
        accounts: [
          { id: 'acme', keys: ['sk-acme-cors-test'], credits: 10, rateLimits: { requestsPerMinute: 100 } },
        ],
      },
    })
  })
  afterAll(() => gw.close())

  it('answers an allowed preflight on /v1 and /routed/v1 with methods, the requested headers and a max age, without a key', async () => {
    for (const url of [
      '/v1/chat/completions',
      '/routed/v1/chat/completions',
      '/v1/messages',
      '/v1/models/mock/chat',
    ]) {
      const res = await preflight(gw, url, {
        origin: page,
        'access-control-request-method': 'POST',
        'access-control-request-headers': sdkHeaders,
      })
      expect(res.statusCode, url).toBe(204)
      expect(res.headers['access-control-allow-origin']).toBe(page)
      expect(res.headers['access-control-allow-methods']).toBe('GET, POST, DELETE, OPTIONS')
      expect(res.headers['access-control-allow-headers']).toBe(sdkHeaders)
      expect(res.headers['access-control-max-age']).toBe('7200')
      expect(res.headers['access-control-allow-credentials']).toBeUndefined()
      expect(res.headers.vary).toContain('Origin')
    }
  })

  it('the Anthropic SDK’s browser headers are allowed', async () => {
    const headers = 'x-api-key, anthropic-version, anthropic-beta, anthropic-dangerous-direct-browser-access'
    const res = await preflight(gw, '/v1/messages', {
      origin: 'https://app.example.com',
      'access-control-request-method': 'POST',
      'access-control-request-headers': headers,
    })
    expect(res.statusCode).toBe(204)
    expect(res.headers['access-control-allow-origin']).toBe('https://app.example.com')
    expect(res.headers['access-control-allow-headers']).toBe(headers)
  })

  it('refuses another origin, an unknown header or method with 403 origin_not_allowed and no allow headers', async () => {
    const cases: Record<string, string>[] = [
      { origin: 'https://evil.example.com', 'access-control-request-method': 'POST' },
      { origin: `${page}.evil.example`, 'access-control-request-method': 'POST' },
      { origin: page, 'access-control-request-method': 'POST', 'access-control-request-headers': 'x-secret' },
      { origin: page, 'access-control-request-method': 'PUT' },
    ]
    for (const headers of cases) {
      const res = await preflight(gw, '/v1/chat/completions', headers)
      expect(res.statusCode, JSON.stringify(headers)).toBe(403)
      expect(res.json().error).toMatchObject({ type: 'permission_error', code: 'origin_not_allowed' })
      expect(Object.keys(res.headers).filter((h) => h.startsWith('access-control-'))).toEqual([])
    }
  })

  it('an OPTIONS that is no preflight, or outside /v1, is not answered as one', async () => {
    expect((await preflight(gw, '/v1/chat/completions', {})).statusCode).toBe(404)
    const health = await preflight(gw, '/healthz', { origin: page, 'access-control-request-method': 'GET' })
    expect(health.statusCode).toBe(405)
    expect(health.headers['access-control-allow-origin']).toBeUndefined()
  })

  it('answers to an allowed origin expose the id and rate-limit headers, errors included', async () => {
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-acme-cors-test', origin: page },
      payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(res.statusCode).toBe(200)
    expect(res.headers['access-control-allow-origin']).toBe(page)
    const exposed = String(res.headers['access-control-expose-headers']).split(', ')
    expect(exposed).toEqual(
      expect.arrayContaining([
        'x-request-id',
        'x-generation-id',
        'x-ratelimit-limit',
        'x-ratelimit-remaining',
        'x-ratelimit-reset',
      ]),
    )
    // The headers named are the ones this answer has.
    expect(res.headers['x-generation-id']).toBeDefined()
    expect(res.headers['x-ratelimit-remaining']).toBeDefined()

    const denied = await gw.app.inject({
      url: '/v1/models',
      headers: { authorization: 'Bearer sk-wrong-key-000', origin: page },
    })
    expect(denied.statusCode).toBe(401)
    expect(denied.headers['access-control-allow-origin']).toBe(page)
    expect(denied.headers['access-control-expose-headers']).toContain('x-request-id')

    const streamed = await gw.app.inject({
      method: 'POST',
      url: '/routed/v1/chat/completions',
      headers: { authorization: 'Bearer sk-acme-cors-test', origin: page },
      payload: { model: 'mock/chat', stream: true, messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(streamed.headers['content-type']).toContain('text/event-stream')
    expect(streamed.headers['access-control-allow-origin']).toBe(page)
    expect(streamed.headers['access-control-expose-headers']).toContain('x-generation-id')

    const unknown = await gw.app.inject({ url: '/v1/nope', headers: { ...devAuth, origin: page } })
    expect(unknown.statusCode).toBe(404)
    expect(unknown.headers['access-control-allow-origin']).toBe(page)

    const other = await gw.app.inject({
      url: '/v1/models',
      headers: { ...devAuth, origin: 'https://evil.example.com' },
    })
    expect(other.headers['access-control-allow-origin']).toBeUndefined()
    expect(other.headers.vary).toContain('Origin')
  })
})

describe('CORS with *', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ file: { server: { cors: { allowedOrigins: ['*'] } } } })
  })
  afterAll(() => gw.close())

  it('allows any origin with *', async () => {
    const res = await preflight(gw, '/v1/embeddings', {
      origin: 'https://anywhere.example',
      'access-control-request-method': 'POST',
    })
    expect(res.statusCode).toBe(204)
    expect(res.headers['access-control-allow-origin']).toBe('*')
    expect(res.headers['access-control-allow-headers']).toContain('authorization')
  })
})

describe('CORS settings', () => {
  const load = (cors: unknown) =>
    loadConfig({ GATEWAY_CONFIG: 'j.json' }, () => JSON.stringify({ server: { cors } }))

  it('an origin must be * or scheme://host[:port]', () => {
    expect(load({ allowedOrigins: ['https://a.example:8443', '*'] }).server.cors.allowedOrigins).toHaveLength(
      2,
    )
    for (const bad of ['https://a.example/', 'a.example', 'https://a.example/app', 'ftp://a.example']) {
      expect(() => load({ allowedOrigins: [bad] }), bad).toThrow(/server\.cors\.allowedOrigins\[0\]/)
    }
    expect(loadConfig({}).server.cors.allowedOrigins).toEqual([])
  })

  it('allowHeadersFor lists the defaults when none are requested and refuses any unknown one', () => {
    expect(allowHeadersFor(undefined)).toContain('x-api-key')
    expect(allowHeadersFor('X-Stainless-Lang, OpenAI-Beta')).toBe('x-stainless-lang, openai-beta')
    expect(allowHeadersFor('authorization, cookie')).toBeUndefined()
  })
})

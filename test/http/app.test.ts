import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }
const json = { ...devAuth, 'content-type': 'application/json' }

describe('auth, errors and operations', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ env: { GATEWAY_BODY_LIMIT_BYTES: '2048' } })
  })
  afterAll(() => gw.close())

  it('answers health and readiness without a key', async () => {
    expect((await gw.app.inject({ url: '/healthz' })).json()).toEqual({ status: 'ok' })
    const ready = await gw.app.inject({ url: '/readyz' })
    expect(ready.statusCode).toBe(200)
  })

  it('puts a 32-hex request id on every response, keeping a well-formed one from the caller', async () => {
    const res = await gw.app.inject({ url: '/healthz' })
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f]{32}$/)
    const given = 'a'.repeat(32)
    const echoed = await gw.app.inject({ url: '/v1/models', headers: { 'x-request-id': given } })
    expect(echoed.headers['x-request-id']).toBe(given)
    expect(echoed.json().request_id).toBe(given)
    const forged = await gw.app.inject({ url: '/healthz', headers: { 'x-request-id': 'not-ours' } })
    expect(forged.headers['x-request-id']).not.toBe('not-ours')
  })

  it.each([
    ['/v1/chat/completions', 'POST'],
    ['/routed/v1/chat/completions', 'POST'],
    ['/v1/embeddings', 'POST'],
    ['/routed/v1/embeddings', 'POST'],
    ['/v1/models', 'GET'],
  ] as const)('%s needs a bearer key', async (url, method) => {
    const missing = await gw.app.inject({ method, url, payload: method === 'POST' ? hello : undefined })
    expect(missing.statusCode).toBe(401)
    expect(missing.json().error).toEqual({
      type: 'authentication_error',
      code: 'missing_api_key',
      message: expect.any(String),
      param: null,
    })
    const wrong = await gw.app.inject({
      method,
      url,
      headers: { authorization: 'Bearer sk-wrong' },
      payload: method === 'POST' ? hello : undefined,
    })
    expect(wrong.statusCode).toBe(401)
    expect(wrong.json().error.code).toBe('invalid_api_key')
  })

  it('rejects a non-bearer authorization scheme', async () => {
    const res = await gw.app.inject({ url: '/v1/models', headers: { authorization: 'Basic c2stZGV2Og==' } })
    expect(res.statusCode).toBe(401)
  })

  it('maps Fastify errors to the envelope: unknown route, invalid JSON, body too large, wrong content type', async () => {
    const notFound = await gw.app.inject({ url: '/v1/nothing-here', headers: devAuth })
    expect(notFound.statusCode).toBe(404)
    expect(notFound.json().error).toMatchObject({ type: 'not_found_error', code: 'route_not_found' })

    const badJson = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: '{"model":',
    })
    expect(badJson.statusCode).toBe(400)
    expect(badJson.json().error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_json',
      param: null,
    })

    const tooBig = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: JSON.stringify({ ...hello, messages: [{ role: 'user', content: 'x'.repeat(4096) }] }),
    })
    expect(tooBig.statusCode).toBe(413)
    expect(tooBig.json().error).toMatchObject({ type: 'invalid_request_error', code: 'payload_too_large' })

    const wrongType = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...devAuth, 'content-type': 'text/plain' },
      payload: 'hello',
    })
    expect(wrongType.statusCode).toBe(415)
    expect(wrongType.json().error).toMatchObject({
      type: 'invalid_request_error',
      code: 'unsupported_media_type',
    })
  })

  it('lists models with their slugs and types', async () => {
    const res = await gw.app.inject({ url: '/v1/models', headers: devAuth })
    expect(res.statusCode).toBe(200)
    const body = res.json()
    expect(body.object).toBe('list')
    expect(body.data).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: 'mock/chat', object: 'model', owned_by: 'mock', type: 'chat' }),
        expect.objectContaining({ id: 'mock/embed', object: 'model', owned_by: 'mock', type: 'embedding' }),
      ]),
    )
    // No key is set in this gateway's environment, so no OpenAI model is listed.
    expect(body.data.some((m: { id: string }) => m.id.startsWith('openai/'))).toBe(false)
  })

  it('unknown model is 404 model_not_found; an embedding model in chat is 400', async () => {
    const unknown = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: { ...hello, model: 'mock/nope' },
    })
    expect(unknown.statusCode).toBe(404)
    expect(unknown.json().error).toMatchObject({ code: 'model_not_found', param: 'model' })
    const wrongType = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: { ...hello, model: 'mock/embed' },
    })
    expect(wrongType.statusCode).toBe(400)
    expect(wrongType.json().error.param).toBe('model')
  })

  it('answers a blocking chat with the generation id and the slug on both paths', async () => {
    for (const url of ['/v1/chat/completions', '/routed/v1/chat/completions']) {
      const res = await gw.app.inject({ method: 'POST', url, headers: json, payload: hello })
      expect(res.statusCode).toBe(200)
      const body = res.json()
      expect(body.id).toMatch(/^gen-[A-Za-z0-9_-]{24,}$/)
      expect(res.headers['x-generation-id']).toBe(body.id)
      expect(body.model).toBe('mock/chat')
      expect(body.object).toBe('chat.completion')
      expect(body.choices[0].message.content).toContain('hello')
      expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + body.usage.completion_tokens)
    }
  })

  it('streams SSE chunks that carry the generation id and end with [DONE]', async () => {
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: { ...hello, stream: true },
    })
    expect(res.statusCode).toBe(200)
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/)
    const events = res.body.split('\n\n').filter(Boolean)
    expect(events.at(-1)).toBe('data: [DONE]')
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')))
    expect(chunks.length).toBeGreaterThan(3)
    for (const c of chunks) {
      expect(c.id).toBe(res.headers['x-generation-id'])
      expect(c.model).toBe('mock/chat')
      expect(c.object).toBe('chat.completion.chunk')
    }
    // The client did not ask for usage: the usage chunk is removed.
    expect(chunks.some((c) => c.usage)).toBe(false)
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
    const blocking = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: hello,
    })
    expect(text).toBe(blocking.json().choices[0].message.content)
  })

  it('sends the usage chunk before [DONE] when include_usage is set', async () => {
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: { ...hello, stream: true, stream_options: { include_usage: true } },
    })
    const events = res.body.split('\n\n').filter(Boolean)
    const last = JSON.parse(events.at(-2)!.replace(/^data: /, ''))
    expect(last.choices).toEqual([])
    expect(last.usage.total_tokens).toBeGreaterThan(0)
  })

  it('embeds on both paths and honours dimensions', async () => {
    for (const url of ['/v1/embeddings', '/routed/v1/embeddings']) {
      const res = await gw.app.inject({
        method: 'POST',
        url,
        headers: json,
        payload: { model: 'mock/embed', input: ['a', 'b'], dimensions: 16 },
      })
      expect(res.statusCode).toBe(200)
      const body = res.json()
      expect(body.model).toBe('mock/embed')
      expect(body.data).toHaveLength(2)
      expect(body.data[0].embedding).toHaveLength(16)
    }
  })

  it('returns validation errors with the failing param', async () => {
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: json,
      payload: { ...hello, messages: [{ role: 'bot', content: 'hi' }] },
    })
    expect(res.statusCode).toBe(400)
    expect(res.json().error).toMatchObject({ type: 'invalid_request_error', param: 'messages[0].role' })
    expect(res.json().request_id).toBe(res.headers['x-request-id'])
  })
})

import { afterEach, describe, expect, it, vi } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw } from '../support/raw-http.ts'

// A request whose whole body came with its headers is admitted once, by the generation's own admission
// (the rate limits and the hold in one store call), instead of once before its body and once with the
// hold (routes/admission.ts). What a client sees does not change: it is counted once, a refusal still
// wins over the body's own errors, and nothing beyond the request itself (a stored file, a stored
// answer) is read for a refused request.

const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello there' }] }
const json = { ...devAuth, 'content-type': 'application/json' }

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

/** A gateway whose accounts may make `rpm` requests a minute, with its admission store calls counted. */
async function gateway(rpm: number) {
  gw = await startGateway({ listen: true, file: { limits: { rateLimits: { requestsPerMinute: rpm } } } })
  const beforeBody = vi.spyOn(gw.deps.store.admission, 'beforeBody')
  const reserve = vi.spyOn(gw.deps.store.admission, 'reserve')
  const calls = {
    get beforeBody() {
      return beforeBody.mock.calls.length
    },
    get reserve() {
      return reserve.mock.calls.length
    },
  }
  return { g: gw, calls }
}

function post(g: TestGateway, path: string, body: unknown): Promise<Response> {
  return fetch(`${g.origin}${path}`, { method: 'POST', headers: json, body: JSON.stringify(body) })
}

describe('admission of a request whose body came with its headers', () => {
  it('makes one admission store call a request, and counts each request once', async () => {
    const { g, calls } = await gateway(10)
    const remaining: (string | null)[] = []
    for (const [path, body] of [
      ['/v1/chat/completions', hello],
      ['/v1/chat/completions', { ...hello, stream: true }],
      ['/v1/embeddings', { model: 'mock/embed', input: 'hello' }],
      ['/v1/responses', { model: 'mock/chat', input: 'hello' }],
      ['/v1/messages', { model: 'mock/chat', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }],
    ] as const) {
      const res = await post(g, path, body)
      await res.text()
      expect(res.status).toBe(200)
      remaining.push(res.headers.get('x-ratelimit-remaining'))
    }
    expect(remaining).toEqual(['9', '8', '7', '6', '5'])
    expect(calls).toEqual({ beforeBody: 0, reserve: 5 })
  })

  it('answers 429 rather than the body’s own error past the limit, and counts refused bodies', async () => {
    const { g, calls } = await gateway(2)
    // An invalid body is a request: it counts.
    const invalid = await post(g, '/v1/chat/completions', { model: 'mock/chat' })
    expect(invalid.status).toBe(400)
    expect(invalid.headers.get('x-ratelimit-remaining')).toBe('1')
    const unknownModel = await post(g, '/v1/chat/completions', { ...hello, model: 'mock/none' })
    expect(unknownModel.status).toBe(404)
    expect(unknownModel.headers.get('x-ratelimit-remaining')).toBe('0')
    for (const body of [{ model: 'mock/chat' }, { ...hello, model: 'mock/none' }, hello]) {
      const res = await post(g, '/v1/chat/completions', body)
      expect(res.status).toBe(429)
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('rate_limit_exceeded')
    }
    // The Messages API's own error handler does the same, in Anthropic's shape.
    const messages = await post(g, '/v1/messages', { model: 'mock/chat' })
    expect(messages.status).toBe(429)
    expect(await messages.json()).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } })
    // Each error ran the admission the body's arrival had deferred; the valid request's hold did.
    expect(calls).toEqual({ beforeBody: 5, reserve: 1 })
  })

  it('reads no stored file and no stored answer for a refused request', async () => {
    const { g } = await gateway(1)
    expect((await post(g, '/v1/chat/completions', hello)).status).toBe(200)
    const fileReads = vi.spyOn(g.deps.store.files, 'get')
    const answerReads = vi.spyOn(g.deps.store.responses, 'get')
    const withFile = await post(g, '/v1/chat/completions', {
      model: 'mock/chat',
      messages: [
        { role: 'user', content: [{ type: 'file', file: { file_id: 'file-abc0000000000000000000' } }] },
      ],
    })
    expect(withFile.status).toBe(429)
    const continued = await post(g, '/v1/responses', {
      model: 'mock/chat',
      input: 'and then?',
      previous_response_id: 'resp_abc',
    })
    expect(continued.status).toBe(429)
    const itemReference = await post(g, '/v1/responses', {
      model: 'mock/chat',
      input: [{ type: 'item_reference', id: 'msg_abc_0' }],
    })
    expect(itemReference.status).toBe(429)
    expect(fileReads).not.toHaveBeenCalled()
    expect(answerReads).not.toHaveBeenCalled()
  })

  it('still refuses a request whose body has not arrived before reading it', async () => {
    const { g, calls } = await gateway(1)
    expect((await post(g, '/v1/chat/completions', hello)).status).toBe(200)
    const raw = await openRaw(g.origin)
    // The head alone, announcing a body that is never sent: the answer cannot wait for it.
    await raw.send(head('POST /v1/chat/completions HTTP/1.1', { ...json, 'content-length': 1000 }))
    const res = await raw.response()
    expect(res.status).toBe(429)
    expect(calls.beforeBody).toBe(1)
    raw.socket.destroy()
  })
})

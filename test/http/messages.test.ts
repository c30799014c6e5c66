import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// /v1/messages request checking and its errors in Anthropic's shape, through app.inject.

let gw: TestGateway
beforeAll(async () => {
  gw = await startGateway()
})
afterAll(() => gw.close())

const key = { 'x-api-key': 'sk-dev' }
const hello = { model: 'mock/chat', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] }

function post(payload: unknown, headers: Record<string, string> = key, url = '/v1/messages') {
  return gw.app.inject({
    method: 'POST',
    url,
    headers: { 'content-type': 'application/json', ...headers },
    payload: typeof payload === 'string' ? payload : JSON.stringify(payload),
  })
}

function expectAnthropicError(
  res: Awaited<ReturnType<typeof post>>,
  status: number,
  type: string,
  message?: string,
) {
  expect(res.statusCode).toBe(status)
  const body = res.json()
  expect(body).toEqual({
    type: 'error',
    error: { type, message: message ?? expect.any(String) },
    request_id: res.headers['x-request-id'],
  })
  expect(res.headers['request-id']).toBe(res.headers['x-request-id'])
}

describe('POST /v1/messages: request checks', () => {
  it('no key at all is an authentication_error that names both ways to send one', async () => {
    const res = await post(hello, {})
    expectAnthropicError(
      res,
      401,
      'authentication_error',
      'missing API key: send x-api-key: <key> or Authorization: Bearer <key>',
    )
  })

  it('a body that is not JSON is an invalid_request_error', async () => {
    expectAnthropicError(
      await post('{"model":'),
      400,
      'invalid_request_error',
      'request body is not valid JSON',
    )
  })

  it('names the field at fault', async () => {
    const badBlock = await post({
      ...hello,
      messages: [{ role: 'user', content: [{ type: 'video', url: 'x' }] }],
    })
    expectAnthropicError(badBlock, 400, 'invalid_request_error')
    expect(badBlock.json().error.message).toMatch(/^messages\[0\]\.content/)
    const badRole = await post({ ...hello, messages: [{ role: 'system', content: 'x' }] })
    expect(badRole.json().error.message).toMatch(/^messages\[0\]\.role/)
    const hot = await post({ ...hello, temperature: 1.5 })
    expect(hot.json().error.message).toMatch(/^temperature/)
    const noBudget = await post({ ...hello, thinking: { type: 'enabled' } })
    expect(noBudget.json().error.message).toMatch(/^thinking\.budget_tokens/)
  })

  it('refuses a built-in tool with a 400 naming it, before any upstream call', async () => {
    const res = await post({ ...hello, tools: [{ type: 'bash_20250124', name: 'bash' }] })
    expectAnthropicError(res, 400, 'invalid_request_error')
    expect(res.json().error.message).toContain('"bash"')
  })

  it('an unknown model is a not_found_error; count_tokens checks its body too', async () => {
    expectAnthropicError(await post({ ...hello, model: 'nobody/x' }), 404, 'not_found_error')
    const count = await post({ model: 'mock/chat' }, key, '/v1/messages/count_tokens')
    expectAnthropicError(count, 400, 'invalid_request_error')
    expect(count.json().error.message).toMatch(/^messages/)
  })

  it('answers with X-Generation-Id, the message id', async () => {
    const ok = await post(hello)
    expect(ok.headers['x-generation-id']).toBe(ok.json().id)
  })
})

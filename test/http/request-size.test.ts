import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { MAX_ARRAY_ITEMS, MAX_CONTAINERS, MAX_OBJECT_KEYS } from '../../src/http/json-body.ts'
import { CHAT_LIMITS } from '../../src/schemas/chat.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// The heavy requests of issue 24 point 4, sent as raw JSON text through the whole app: each is refused
// with a 400 naming the field before any model is called, or answered.

const json = { ...devAuth, 'content-type': 'application/json' }
const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }
const call = (i: number) => ({ id: `call_${i}`, type: 'function', function: { name: 'f', arguments: '{}' } })
const wide = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']))

describe('request size limits through HTTP', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const post = async (url: string, payload: string) => {
    const res = await gw.app.inject({ method: 'POST', url, headers: json, payload })
    return { status: res.statusCode, body: res.json() }
  }
  const chat = (fields: Record<string, unknown>) =>
    post('/v1/chat/completions', JSON.stringify({ ...hello, ...fields }))

  it.each<[string, () => Record<string, unknown>, string, string]>([
    [
      '1 025 tools',
      () => ({
        tools: Array.from({ length: 1025 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })),
      }),
      'tools',
      'at most 1024 tools',
    ],
    [
      '10 001 tool calls',
      () => ({
        messages: [
          ...hello.messages,
          { role: 'assistant', tool_calls: Array.from({ length: 10_001 }, (_, i) => call(i)) },
        ],
      }),
      'messages[1].tool_calls',
      'at most 10000 tool calls',
    ],
    [
      '10 001 messages',
      () => ({ messages: Array(10_001).fill(hello.messages[0]) }),
      'messages',
      'at most 10000 items',
    ],
    [
      '10 001 content parts',
      () => ({ messages: [{ role: 'user', content: Array(10_001).fill({ type: 'text', text: 'a' }) }] }),
      'messages[0].content',
      'at most 10000 content parts',
    ],
    [
      '5 000 logit_bias ids',
      () => ({ logit_bias: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [i, 1])) }),
      'logit_bias',
      'at most 1024 token ids',
    ],
    // Past MAX_CONTAINERS objects and arrays in all, the parser stops building and names the field.
    [
      '100 000 tools',
      () => ({
        tools: Array.from({ length: 100_000 }, (_, i) => ({ type: 'function', function: { name: `f${i}` } })),
      }),
      'tools',
      `more than ${MAX_CONTAINERS} objects and arrays`,
    ],
    [
      '1 000 000 empty objects in an unknown field',
      () => ({ extra: Array(1_000_000).fill({}) }),
      'extra',
      `more than ${MAX_CONTAINERS} objects and arrays`,
    ],
    // Past MAX_OBJECT_KEYS anywhere, the parser refuses the object before building more of it.
    ['a 100 000-key metadata', () => ({ metadata: wide(100_000) }), 'metadata', 'more than 10000 keys'],
    [
      'a wide unknown field',
      () => ({ extra: { deeper: [wide(MAX_OBJECT_KEYS + 1)] } }),
      'extra.deeper[0]',
      'more than 10000 keys',
    ],
    [
      'a wide tool schema',
      () => ({
        tools: [
          {
            type: 'function',
            function: { name: 'f', parameters: { type: 'object', properties: wide(MAX_OBJECT_KEYS + 1) } },
          },
        ],
      }),
      'tools[0].function.parameters.properties',
      'more than 10000 keys',
    ],
  ])('%s: 400 invalid_value naming the field and its limit', async (_, fields, param, message) => {
    const res = await chat(fields())
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_value', param })
    expect(res.body.error.message).toContain(message)
  })

  it('seed 1e309 (Infinity once parsed) is a 400 naming seed; a safe integer seed is answered', async () => {
    const text = JSON.stringify(hello).slice(0, -1)
    const res = await post('/v1/chat/completions', `${text},"seed":1e309}`)
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'invalid_value', param: 'seed' })
    expect((await post('/v1/chat/completions', `${text},"seed":${Number.MAX_SAFE_INTEGER}}`)).status).toBe(
      200,
    )
  })

  it('takes the largest accepted lists, and a 9.9 MB single message', async () => {
    const most = await chat({
      messages: [
        { role: 'user', content: Array(CHAT_LIMITS.contentParts).fill({ type: 'text', text: 'a' }) },
        { role: 'assistant', tool_calls: Array.from({ length: CHAT_LIMITS.toolCalls }, (_, i) => call(i)) },
        { role: 'tool', tool_call_id: 'call_0', content: 'ok' },
      ],
      tools: Array.from({ length: CHAT_LIMITS.tools }, (_, i) => ({
        type: 'function',
        function: { name: `f${i}` },
      })),
      metadata: wide(16),
    })
    expect(most.status).toBe(200)
    const big = await chat({ messages: [{ role: 'user', content: 'word '.repeat(1_980_000) }] })
    expect(big.status).toBe(200)
    expect(big.body.usage.prompt_tokens).toBe(1_980_000)
  })

  it('3 000 000 embedding tokens in one array are a 400 naming input, from the parser', async () => {
    const res = await post(
      '/routed/v1/embeddings',
      JSON.stringify({ model: 'mock/embed', input: Array(3_000_000).fill(1) }),
    )
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'invalid_value', param: 'input' })
    expect(res.body.error.message).toBe(`input has more than ${MAX_ARRAY_ITEMS} items`)
  })

  it('300 001 embedding tokens are a 400 naming input', async () => {
    const res = await post(
      '/routed/v1/embeddings',
      JSON.stringify({ model: 'mock/embed', input: Array(300_001).fill(1) }),
    )
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ code: 'invalid_value', param: 'input' })
  })
})

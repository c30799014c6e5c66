import { describe, expect, it } from 'vitest'
import { chatRequestSchema, fastChatRequest, parseChatRequest } from '../../../src/schemas/chat.ts'

// The hand-checked fast path of the chat request must only ever accept what zod accepts, and give
// exactly zod's value (the same keys in the same order); anything else it leaves to zod. Compared on
// many generated requests, valid and not, and on the shapes the rest of the suite sends.

/** A fixed pseudo-random sequence, so that a failure can be replayed from its seed. */
function random(seed: number): () => number {
  let x = seed >>> 0
  return () => {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    return x / 4_294_967_296
  }
}

const TEXT = ['', 'Hello', 'é 漢字 🙂', 'x'.repeat(300)]
const MODELS = ['openai/gpt-4o-mini', 'gpt-5', 'a/b/c', 'bad model', '/x', 'a/', 'x'.repeat(257), '', 7, null]
const NUMBERS = [0, -0, 1, 2, 0.5, -1, -2, 2.5, 128, 1e20, 2 ** 53, 1.5, null, '1', true, 1e308 * 10]
const VALUES: Record<string, unknown[]> = {
  max_tokens: NUMBERS,
  max_completion_tokens: NUMBERS,
  temperature: NUMBERS,
  top_p: NUMBERS,
  n: NUMBERS,
  frequency_penalty: NUMBERS,
  presence_penalty: NUMBERS,
  seed: NUMBERS,
  parallel_tool_calls: [true, false, null, 'yes'],
  stream: [true, false, null, 'true', 1],
  stream_options: [
    null,
    { include_usage: true },
    { include_usage: false, include_obfuscation: true },
    { include_obfuscation: false, include_usage: true },
    { include_usage: 'yes' },
    { other: 1 },
    {},
    [],
    'x',
  ],
  logprobs: [true, false, null],
  top_logprobs: [0, 3, 21],
  tools: [[{ type: 'function', function: { name: 'f' } }]],
  tool_choice: ['auto', 'none'],
  metadata: [{ a: 'b' }],
  response_format: [{ type: 'json_object' }],
  user: ['u-1', 7, null],
  store: [true],
  reasoning_effort: ['low', 'huge'],
  // Unknown fields are kept as they come, whatever they hold.
  x_extra: [{ nested: [1, 2] }, null, 'v'],
}

function pick<T>(r: () => number, list: readonly T[]): T {
  return list[Math.floor(r() * list.length)]!
}

function content(r: () => number): unknown {
  switch (Math.floor(r() * 12)) {
    case 0:
    case 1:
    case 2:
    case 9:
    case 10:
    case 11:
      return pick(r, TEXT)
    case 3:
      return [{ type: 'text', text: pick(r, TEXT) }]
    case 4:
      return [
        { text: 'a', type: 'text', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: pick(r, TEXT) },
      ]
    case 5:
      return [{ type: 'image_url', image_url: { url: 'https://example.test/a.png' } }]
    case 6:
      return pick(r, [[], null, 7, [{ type: 'text' }], [{ type: 'text', text: 1 }], ['text']])
    case 7:
      return [{ type: 'weird', data: 1 }]
    default:
      return undefined
  }
}

function message(r: () => number): unknown {
  const role = pick(r, ['user', 'user', 'system', 'developer', 'assistant', 'assistant', 'tool', 'bot', 7])
  const m: Record<string, unknown> = {}
  const fields: [string, () => unknown][] = [
    ['role', () => role],
    ['content', () => content(r)],
    ['name', () => pick(r, ['ann', 7, null, ''])],
    ['extra', () => pick(r, [{ a: 1 }, 'x', null])],
    ['tool_calls', () => [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }]],
    ['tool_call_id', () => 'c1'],
    ['refusal', () => pick(r, [null, 'no'])],
    ['reasoning', () => 'because'],
  ]
  // Fields in a random order, each present or not (role and content mostly present).
  for (const [key, make] of fields.sort(() => r() - 0.5)) {
    const p = key === 'role' ? 0.97 : key === 'content' ? 0.95 : 0.06
    if (r() < p) {
      const v = make()
      if (v !== undefined) m[key] = v
    }
  }
  return r() < 0.02 ? pick(r, [null, 'hi', [m]]) : m
}

function request(r: () => number): Record<string, unknown> {
  const body: Record<string, unknown> = {}
  const entries: [string, () => unknown][] = [
    ['model', () => (r() < 0.8 ? 'openai/gpt-4o-mini' : pick(r, MODELS))],
    [
      'messages',
      () =>
        r() < 0.03
          ? pick(r, [[], null, 'hi', {}])
          : Array.from({ length: 1 + Math.floor(r() * 4) }, () => message(r)),
    ],
    ...Object.keys(VALUES).map((key): [string, () => unknown] => [key, () => pick(r, VALUES[key]!)]),
  ]
  for (const [key, make] of entries.sort(() => r() - 0.5)) {
    const p = key === 'model' || key === 'messages' ? 0.97 : 0.06
    if (r() < p) body[key] = make()
  }
  return body
}

/** zod's verdict (the fast path bypassed) and the fast path's, on one body. */
function compare(body: Record<string, unknown>): 'fast' | 'zod' {
  const zod = chatRequestSchema.safeParse(structuredClone(body))
  const fast = fastChatRequest(structuredClone(body))
  if (fast === undefined) return 'zod'
  if (!zod.success) {
    throw new Error(`the fast path accepted what zod refuses: ${JSON.stringify(body)}\n${zod.error.message}`)
  }
  expect(JSON.stringify(fast), JSON.stringify(body)).toBe(JSON.stringify(zod.data))
  expect(fast).toStrictEqual(zod.data)
  return 'fast'
}

describe('the chat request fast path', () => {
  it('agrees with zod on 20 000 generated requests, valid and invalid', () => {
    const counts = { fast: 0, zod: 0, zodAccepts: 0 }
    for (let seed = 1; seed <= 20_000; seed++) {
      const body = request(random(seed))
      counts[compare(body)]++
      if (chatRequestSchema.safeParse(body).success) counts.zodAccepts++
    }
    // Every kind was exercised: requests the fast path took, valid ones it left to zod, invalid ones.
    expect(counts.fast).toBeGreaterThan(500)
    expect(counts.zodAccepts - counts.fast).toBeGreaterThan(500)
    expect(20_000 - counts.zodAccepts).toBeGreaterThan(5_000)
  })

  it.each([
    ['the bench request', { model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] }],
    [
      'a streamed one with usage',
      {
        messages: [{ content: 'hello', role: 'user' }],
        stream: true,
        model: 'team/chat',
        stream_options: { include_usage: true },
      },
    ],
    [
      'a conversation with unknown fields',
      {
        user: 'u',
        model: 'gpt-5',
        temperature: 0.2,
        messages: [
          { role: 'system', content: [{ type: 'text', text: 'Be brief.' }], cache_control: { type: 'x' } },
          { role: 'user', content: 'hi', name: 'ann' },
          { role: 'assistant', content: 'hello', function_call: { name: 'f', arguments: '{}' } },
          { role: 'user', content: 'more' },
        ],
        max_tokens: 100,
      },
    ],
  ])('takes %s, with zod’s value', (_, body) => {
    expect(compare(body)).toBe('fast')
    expect(parseChatRequest(structuredClone(body))).toStrictEqual(chatRequestSchema.parse(body))
  })

  it.each([
    ['a tool message', { role: 'tool', content: 'r', tool_call_id: 'c' }],
    [
      'an image part',
      { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x.test/a' } }] },
    ],
    ['an assistant message with tool calls', { role: 'assistant', content: null, tool_calls: [] }],
  ])('leaves %s to zod', (_, m) => {
    expect(fastChatRequest({ model: 'a/b', messages: [m] })).toBeUndefined()
  })

  it('leaves a __proto__ key to zod, at the top and in a message', () => {
    const top = JSON.parse('{"model":"a/b","messages":[{"role":"user","content":"x"}],"__proto__":{"x":1}}')
    const inner = JSON.parse('{"model":"a/b","messages":[{"role":"user","content":"x","__proto__":{"x":1}}]}')
    expect(fastChatRequest(top as Record<string, unknown>)).toBeUndefined()
    expect(fastChatRequest(inner as Record<string, unknown>)).toBeUndefined()
    compare(top as Record<string, unknown>)
  })

  it('leaves every refused request to zod, which words the error', () => {
    expect(() => parseChatRequest({ model: 'a/b', messages: [], stream: true })).toThrow(/messages/)
    expect(() =>
      parseChatRequest({ model: 'a/b', messages: [{ role: 'user', content: 'x' }], stream_options: {} }),
    ).toThrow(/stream_options requires stream: true/)
    expect(() =>
      parseChatRequest({ model: 'a/b', messages: [{ role: 'user', content: 'x' }], temperature: 3 }),
    ).toThrow(/temperature/)
  })
})

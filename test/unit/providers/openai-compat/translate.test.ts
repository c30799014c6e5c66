import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { fromOpenAIError } from '../../../../src/providers/openai-compat/errors.ts'
import { toOpenAIChatRequest } from '../../../../src/providers/openai-compat/request.ts'
import {
  fromOpenAIChunk,
  fromOpenAICompletion,
  toFinishReason,
} from '../../../../src/providers/openai-compat/response.ts'
import { openAICompletionSchema, parseOpenAIChunk } from '../../../../src/providers/openai-compat/wire.ts'
import type { ChatRequest } from '../../../../src/providers/types.ts'
import { parseChatRequest } from '../../../../src/schemas/chat.ts'
import { scrubSecrets } from '../../../../src/providers/http.ts'

const fixture = (name: string) =>
  readFileSync(new URL(`../../../fixtures/openai-compat/${name}`, import.meta.url), 'utf8')
const sseEvents = (name: string) =>
  fixture(name)
    .split('\n\n')
    .map((e) => e.replace(/^data: /, '').trim())
    .filter((e) => e !== '' && e !== '[DONE]')
    .map((e) => JSON.parse(e) as unknown)

/** A stream event through the parser production uses; a test fails on an event it refuses. */
function chunkOf(event: unknown) {
  const c = parseOpenAIChunk(event)
  if (c === null) throw new Error(`parseOpenAIChunk refused ${JSON.stringify(event)}`)
  return c
}

const base: ChatRequest = { model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] }

describe('toOpenAIChatRequest', () => {
  it('sends the output limit in the field the upstream understands, whichever the client used', () => {
    const base: ChatRequest = { model: 'm/x', messages: [{ role: 'user', content: 'hi' }] }
    const limits = (req: ChatRequest, field: 'max_tokens' | 'max_completion_tokens') => {
      const body = toOpenAIChatRequest(req, 'x', field)
      return [body.max_tokens, body.max_completion_tokens]
    }
    expect(limits({ ...base, max_completion_tokens: 100 }, 'max_tokens')).toEqual([100, undefined])
    expect(limits({ ...base, max_tokens: 100 }, 'max_completion_tokens')).toEqual([undefined, 100])
    expect(limits({ ...base, max_tokens: 5, max_completion_tokens: 100 }, 'max_tokens')).toEqual([
      100,
      undefined,
    ])
    expect(limits(base, 'max_tokens')).toEqual([undefined, undefined])
  })

  it('sends the upstream model id and forwards unknown fields unchanged', () => {
    const body = toOpenAIChatRequest(
      { ...base, temperature: 0.2, some_future_field: { x: 1 } },
      'gpt-4o-mini',
    )
    expect(body).toEqual({
      model: 'gpt-4o-mini',
      messages: base.messages,
      temperature: 0.2,
      some_future_field: { x: 1 },
    })
  })

  it('forwards content parts of a kind the gateway does not know unchanged', () => {
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Describe it.' },
          { type: 'video_url', video_url: { url: 'https://example.com/v.mp4' }, extra: 1 },
        ],
      },
    ]
    const req = parseChatRequest({ model: 'vllm/qwen', messages })
    expect(toOpenAIChatRequest(req, 'qwen').messages).toEqual(messages)
  })

  it('removes the gateway-only extensions', () => {
    const body = toOpenAIChatRequest(
      {
        ...base,
        provider: { routing: { type: 'priority', providers: ['openai'] } },
        model_routing_config: { available_models: ['a/b'] },
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: 'x',
            reasoning: 'because',
            reasoning_details: [{ type: 'reasoning.text', text: 'because' }],
          },
        ],
      },
      'gpt-4o-mini',
    )
    expect(body).not.toHaveProperty('provider')
    expect(body).not.toHaveProperty('model_routing_config')
    expect(body.messages).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'x' },
    ])
  })

  it('maps reasoning to reasoning_effort unless the client set it', () => {
    expect(
      toOpenAIChatRequest({ ...base, reasoning: { enabled: true, effort: 'high' } }, 'o3').reasoning_effort,
    ).toBe('high')
    expect(toOpenAIChatRequest({ ...base, reasoning: { enabled: true } }, 'o3').reasoning_effort).toBe(
      'medium',
    )
    const both = toOpenAIChatRequest(
      { ...base, reasoning_effort: 'low', reasoning: { enabled: true, effort: 'high' } },
      'o3',
    )
    expect(both.reasoning_effort).toBe('low')
    expect(both).not.toHaveProperty('reasoning')
  })

  it('always asks for usage on streams, keeping the client’s other stream options', () => {
    const body = toOpenAIChatRequest(
      { ...base, stream: true, stream_options: { include_obfuscation: false } },
      'm',
    )
    expect(body.stream_options).toEqual({ include_obfuscation: false, include_usage: true })
  })
})

describe('responses', () => {
  it('keeps a documented completion as it is, usage details included', () => {
    const raw = JSON.parse(fixture('completion.json'))
    const c = fromOpenAICompletion(openAICompletionSchema.parse(raw), 0)
    expect(c).toEqual(raw)
  })

  it('turns a documented stream into chunks, usage chunk last', () => {
    const chunks = sseEvents('text.sse').map((e) => fromOpenAIChunk(chunkOf(e), 0))
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? null)).toEqual(['', 'Hello', null, null])
    expect(chunks[2]?.choices[0]?.finish_reason).toBe('stop')
    expect(chunks[3]).toMatchObject({
      choices: [],
      usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
    })
  })

  it('lifts DeepSeek reasoning_content into reasoning', () => {
    const chunks = sseEvents('deepseek-reasoning.sse').map((e) => fromOpenAIChunk(chunkOf(e), 0))
    expect(chunks[1]?.choices[0]?.delta).toEqual({ content: null, reasoning: 'Think' })
    expect(chunks[1]?.choices[0]?.delta).not.toHaveProperty('reasoning_content')
  })

  it('reads usage without completion_tokens as 0 completion tokens, in a stream and in a completion', () => {
    const event = { id: 'c', choices: [], usage: { prompt_tokens: 7, total_tokens: 7 } }
    expect(fromOpenAIChunk(chunkOf(event), 0).usage).toEqual({
      prompt_tokens: 7,
      completion_tokens: 0,
      total_tokens: 7,
    })
    const raw = { ...JSON.parse(fixture('completion.json')), usage: { prompt_tokens: 7, total_tokens: 7 } }
    expect(fromOpenAICompletion(openAICompletionSchema.parse(raw), 0).usage).toEqual({
      prompt_tokens: 7,
      completion_tokens: 0,
      total_tokens: 7,
    })
  })

  it('takes a chunk without choices as one with none', () => {
    expect(chunkOf({ id: 'c', usage: null }).choices).toEqual([])
  })

  it.each<[string, unknown]>([
    ['a chunk that is no object', 'data'],
    ['choices that are no array', { choices: {} }],
    ['a choice without index', { choices: [{ delta: {} }] }],
    ['a delta that is no object', { choices: [{ index: 0, delta: 'hi' }] }],
    ['a numeric finish_reason', { choices: [{ index: 0, delta: {}, finish_reason: 1 }] }],
    ['usage that is no object', { choices: [], usage: 7 }],
    ['usage without prompt_tokens', { choices: [], usage: { completion_tokens: 1, total_tokens: 1 } }],
    ['usage without total_tokens', { choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } }],
    [
      'non-numeric completion_tokens',
      { choices: [], usage: { prompt_tokens: 7, completion_tokens: '2', total_tokens: 9 } },
    ],
    [
      'null completion_tokens',
      { choices: [], usage: { prompt_tokens: 7, completion_tokens: null, total_tokens: 7 } },
    ],
  ])('refuses %s', (_, event) => {
    expect(parseOpenAIChunk(event)).toBeNull()
  })

  it('uses created when it is a number, else the time of arrival', () => {
    expect(fromOpenAIChunk(chunkOf({ created: 5, choices: [] }), 9000).created).toBe(5)
    expect(fromOpenAIChunk(chunkOf({ created: 'x', choices: [] }), 9000).created).toBe(9)
  })

  it('serialises a translated chunk as a copy with the same fields would, keys where the upstream put them', () => {
    // The chunk is changed in place (no copy per chunk): what leaves must be what a copy gave.
    const copyOf = (c: Record<string, unknown>, now: number): unknown => ({
      ...c,
      id: typeof c.id === 'string' ? c.id : '',
      object: 'chat.completion.chunk',
      created: typeof c.created === 'number' ? c.created : Math.floor(now / 1000),
      model: typeof c.model === 'string' ? c.model : '',
      choices: (c.choices as Record<string, unknown>[]).map((ch) => ({
        ...ch,
        delta: ch.delta ?? {},
        finish_reason: toFinishReason(ch.finish_reason as string | null | undefined),
      })),
    })
    const events = [
      ...sseEvents('text.sse'),
      { choices: [{ index: 0, finish_reason: 'eos' }], x_vendor: { a: 1 } },
      { model: 7, choices: [{ index: 0, delta: { content: 'a' }, logprobs: null }], usage: null },
    ]
    for (const event of events) {
      const expected = JSON.stringify(copyOf(structuredClone(event) as Record<string, unknown>, 9000))
      expect(JSON.stringify(fromOpenAIChunk(chunkOf(event), 9000))).toBe(expected)
    }
  })

  it('maps unknown finish reasons to stop and keeps the known ones', () => {
    expect(toFinishReason('eos')).toBe('stop')
    expect(toFinishReason('length')).toBe('length')
    expect(toFinishReason('tool_calls')).toBe('tool_calls')
    expect(toFinishReason(null)).toBeNull()
  })
})

describe('fromOpenAIError', () => {
  const secret = 'sk-proj-abcdefghijklmnop'
  it.each([
    [400, { error: { message: 'Invalid value for temperature' } }, 400, 'invalid_request_error'],
    [404, { error: { message: 'The model does not exist' } }, 400, 'invalid_request_error'],
    [401, { error: { message: `Incorrect API key provided: ${secret}` } }, 502, 'upstream_error'],
    [500, { error: { message: 'boom' } }, 502, 'upstream_error'],
    [503, 'overloaded', 502, 'upstream_error'],
    [429, { error: { message: 'slow down' } }, 429, 'rate_limit_error'],
  ])('upstream %i → %i', (status, body, expected, type) => {
    const e = fromOpenAIError('openai', status, typeof body === 'string' ? body : JSON.stringify(body), '7', [
      secret,
    ])
    expect(e.status).toBe(expected)
    expect(e.type).toBe(type)
    expect(e.message).not.toContain(secret)
    if (expected === 429) expect(e.headers['retry-after']).toBe('7')
    if (expected === 400) expect(e.message).toContain((body as { error: { message: string } }).error.message)
  })

  it('never lets a key through in a client-visible message', () => {
    const body = JSON.stringify({
      error: { message: `bad param; your key sk-live-0123456789abcdef and Bearer xyz.abc` },
    })
    const e = fromOpenAIError('openai', 400, body, undefined)
    expect(e.message).not.toMatch(/sk-live|xyz\.abc/)
    expect(scrubSecrets('https://x/?key=AIzaSyA-secret&alt=sse')).toBe('https://x/?key=[redacted]&alt=sse')
  })
})

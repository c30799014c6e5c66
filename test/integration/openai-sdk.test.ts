import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sendSse, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// The official OpenAI SDK, configured only with a base URL and a key, against the listening gateway:
// what an SDK user sees. The built-in mock provider serves `mock/chat` and `mock/embed`.

const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
  { role: 'user', content: 'Tell me something about foxes, please.' },
]

const weatherTool: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer' },
        units: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['city', 'days', 'units'],
    },
  },
}

function norm(vector: ArrayLike<number>): number {
  let sum = 0
  for (let i = 0; i < vector.length; i++) sum += (vector[i] as number) ** 2
  return Math.sqrt(sum)
}

describe('OpenAI SDK against the gateway (mock provider)', () => {
  let gw: TestGateway
  let client: OpenAI

  beforeAll(async () => {
    gw = await startGateway({ listen: true })
    client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev' })
  })

  afterAll(async () => {
    await gw?.close()
  })

  it('creates a blocking chat completion', async () => {
    const completion = await client.chat.completions.create({ model: 'mock/chat', messages })
    expect(completion.id).toMatch(/^gen-[A-Za-z0-9_-]{24,}$/)
    expect(completion.object).toBe('chat.completion')
    expect(completion.model).toBe('mock/chat')
    const choice = completion.choices[0]!
    expect(choice.message.role).toBe('assistant')
    expect(choice.message.content).toEqual(expect.any(String))
    expect(choice.message.content!.length).toBeGreaterThan(0)
    expect(choice.finish_reason).toBe('stop')
    const usage = completion.usage!
    expect(usage.prompt_tokens).toBeGreaterThan(0)
    expect(usage.completion_tokens).toBeGreaterThan(0)
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens)
  })

  it('streams the same content as the blocking answer, and usage last when asked', async () => {
    const blocking = await client.chat.completions.create({ model: 'mock/chat', messages })

    const stream = await client.chat.completions.create({ model: 'mock/chat', messages, stream: true })
    let content = ''
    const ids = new Set<string>()
    let finish: string | null = null
    for await (const chunk of stream) {
      ids.add(chunk.id)
      expect(chunk.model).toBe('mock/chat')
      expect(chunk.usage ?? undefined).toBeUndefined()
      content += chunk.choices[0]?.delta.content ?? ''
      finish = chunk.choices[0]?.finish_reason ?? finish
    }
    expect(content).toBe(blocking.choices[0]!.message.content)
    expect(finish).toBe('stop')
    // One generation: every chunk carries the same gateway id, a different one from the blocking call's.
    expect(ids.size).toBe(1)
    const [streamId] = [...ids]
    expect(streamId).toMatch(/^gen-/)
    expect(streamId).not.toBe(blocking.id)

    const withUsage = await client.chat.completions.create({
      model: 'mock/chat',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const chunk of withUsage) chunks.push(chunk)
    const last = chunks.at(-1)!
    expect(last.choices).toEqual([])
    expect(last.usage).toMatchObject({
      prompt_tokens: blocking.usage!.prompt_tokens,
      completion_tokens: blocking.usage!.completion_tokens,
      total_tokens: blocking.usage!.total_tokens,
    })
    expect(chunks.slice(0, -1).every((c) => c.usage === undefined || c.usage === null)).toBe(true)
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(content)
  })

  it('returns a forced tool call, blocking', async () => {
    const completion = await client.chat.completions.create({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [weatherTool],
      tool_choice: 'required',
    })
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    const call = choice.message.tool_calls?.[0]
    expect(call?.type).toBe('function')
    if (call?.type !== 'function') throw new Error('expected a function tool call')
    expect(call.id.length).toBeGreaterThan(0)
    expect(call.function.name).toBe('get_weather')
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'mock', days: 1, units: 'celsius' })
  })

  it('streams a forced tool call that the SDK reassembles', async () => {
    const request = {
      model: 'mock/chat',
      messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
      tools: [weatherTool],
      tool_choice: 'required' as const,
    }
    const blocking = await client.chat.completions.create(request)
    const blockingCall = blocking.choices[0]!.message.tool_calls![0]!

    const final = await client.chat.completions.stream(request).finalChatCompletion()
    expect(final.id).toMatch(/^gen-/)
    const choice = final.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    const call = choice.message.tool_calls?.[0]
    if (call?.type !== 'function' || blockingCall.type !== 'function') {
      throw new Error('expected function tool calls')
    }
    expect(call.id).toBe(blockingCall.id)
    expect(call.function.name).toBe('get_weather')
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'mock', days: 1, units: 'celsius' })
    expect(call.function.arguments).toBe(blockingCall.function.arguments)
  })

  it('creates embeddings for a string and an array with the requested dimensions', async () => {
    const one = await client.embeddings.create({ model: 'mock/embed', input: 'hello world', dimensions: 64 })
    expect(one.model).toBe('mock/embed')
    expect(one.data).toHaveLength(1)
    expect(one.data[0]!.embedding).toHaveLength(64)
    expect(norm(one.data[0]!.embedding)).toBeCloseTo(1, 4)
    expect(one.usage.prompt_tokens).toBeGreaterThan(0)

    const many = await client.embeddings.create({
      model: 'mock/embed',
      input: ['hello world', 'second text', 'third'],
      dimensions: 64,
    })
    expect(many.data.map((d) => d.index)).toEqual([0, 1, 2])
    for (const d of many.data) {
      expect(d.embedding).toHaveLength(64)
      expect(norm(d.embedding)).toBeCloseTo(1, 4)
    }
    // Deterministic per text: the same text gives the same vector in both calls.
    expect(many.data[0]!.embedding).toEqual(one.data[0]!.embedding)
    expect(many.data[1]!.embedding).not.toEqual(many.data[0]!.embedding)

    // Explicit floats (the SDK asks for base64 by default and decodes it) give the same vector.
    const floats = await client.embeddings.create({
      model: 'mock/embed',
      input: 'hello world',
      dimensions: 64,
      encoding_format: 'float',
    })
    expect(floats.data[0]!.embedding).toEqual(one.data[0]!.embedding)
  })

  it('lists the mock models', async () => {
    const ids: string[] = []
    for await (const model of client.models.list()) ids.push(model.id)
    expect(ids).toContain('mock/chat')
    expect(ids).toContain('mock/embed')
  })

  it('raises the SDK error classes for gateway errors', async () => {
    const badKey = new OpenAI({
      baseURL: `${gw.origin}/v1`,
      apiKey: 'sk-not-a-real-key-000000',
      maxRetries: 0,
    })
    const authError = await badKey.chat.completions
      .create({ model: 'mock/chat', messages })
      .catch((e: unknown) => e)
    expect(authError).toBeInstanceOf(OpenAI.AuthenticationError)
    expect((authError as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401)

    const strict = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
    const notFound = await strict.chat.completions
      .create({ model: 'mock/does-not-exist', messages })
      .catch((e: unknown) => e)
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError)
    expect((notFound as InstanceType<typeof OpenAI.NotFoundError>).status).toBe(404)

    const badN = await strict.chat.completions
      .create({ model: 'mock/chat', messages, n: 2 })
      .catch((e: unknown) => e)
    expect(badN).toBeInstanceOf(OpenAI.BadRequestError)
    const err = badN as InstanceType<typeof OpenAI.BadRequestError>
    expect(err.status).toBe(400)
    expect(err.param).toBe('n')
    expect(err.code).toBe('unsupported_parameter')
    expect(err.type).toBe('invalid_request_error')
  })
})

describe('OpenAI SDK through the gateway to an OpenAI-compatible upstream', () => {
  const upstreamKey = 'sk-test-upstream-secret-123456'
  let fake: FakeUpstream
  let gw: TestGateway

  const upstreamChunk = (choices: unknown[], extra: Record<string, unknown> = {}): string =>
    JSON.stringify({
      id: 'chatcmpl-upstream-9',
      object: 'chat.completion.chunk',
      created: 1_700_000_000,
      model: 'gpt-4o-mini-2024-07-18',
      choices,
      ...extra,
    })

  beforeAll(async () => {
    fake = await startFakeUpstream({
      'POST /v1/chat/completions': (_req, res) =>
        sendSse(res, [
          upstreamChunk([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }]),
          upstreamChunk([{ index: 0, delta: { content: 'Foxes are ' }, finish_reason: null }]),
          upstreamChunk([{ index: 0, delta: { content: 'quick.' }, finish_reason: null }]),
          upstreamChunk([{ index: 0, delta: {}, finish_reason: 'stop' }]),
          upstreamChunk([], { usage: { prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 } }),
          '[DONE]',
        ]),
    })
    gw = await startGateway({
      env: { OPENAI_API_KEY: upstreamKey, OPENAI_BASE_URL: `${fake.origin}/v1` },
      listen: true,
    })
  })

  afterAll(async () => {
    await fake?.close()
    await gw?.close()
  })

  it('streams an upstream answer to the SDK', async () => {
    const client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev' })
    const stream = await client.chat.completions.create({
      model: 'openai/gpt-4o-mini',
      messages,
      stream: true,
      stream_options: { include_usage: true },
    })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const chunk of stream) chunks.push(chunk)

    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Foxes are quick.')
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(chunks[0]!.id).toMatch(/^gen-/)
    expect(chunks.every((c) => c.model === 'openai/gpt-4o-mini')).toBe(true)
    expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 8, completion_tokens: 3, total_tokens: 11 })

    expect(fake.requests).toHaveLength(1)
    const sent = fake.requests[0]!
    expect(sent.headers.authorization).toBe(`Bearer ${upstreamKey}`)
    expect(sent.body).toMatchObject({
      model: 'gpt-4o-mini',
      stream: true,
      stream_options: { include_usage: true },
    })
  })
})

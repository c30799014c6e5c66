import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import {
  jsonFile,
  sendJson,
  sendSse,
  sentBody,
  sseFile,
  startFakeUpstream,
  type FakeHandler,
} from '../support/fake-upstream.ts'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import { readJsonFixture } from '../support/fixtures.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// POST /v1/messages and /v1/messages/count_tokens, driven by the official @anthropic-ai/sdk against the
// listening gateway: in front of the mock, of a fake Anthropic Messages API and of a fake
// OpenAI-compatible one (real HTTP servers on 127.0.0.1).

type ApiError = InstanceType<typeof Anthropic.APIError>

const UPSTREAM_KEY = 'sk-ant-api03-FAKE-test-key-0000000000'
const CLAUDE = 'anthropic/claude-sonnet-4-5'
const GPT = 'openai/gpt-4o-mini'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function gateway(env: Record<string, string> = {}): Promise<TestGateway> {
  const gw = await startGateway({ env, listen: true })
  cleanups.push(() => gw.close())
  return gw
}

/** A fake upstream and the gateway in front of it, both closed after the test (the fake first). */
async function behind(routes: Record<string, FakeHandler>, env: (origin: string) => Record<string, string>) {
  const fake = await startFakeUpstream(routes)
  cleanups.push(() => fake.close())
  const gw = await startGateway({ env: env(fake.origin), listen: true })
  cleanups.splice(cleanups.length - 1, 0, () => gw.close())
  return { fake, gw, client: sdk(gw) }
}

const anthropicUpstream = (routes: Record<string, FakeHandler>) =>
  behind(routes, (origin) => ({ ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: origin }))
const openaiUpstream = (routes: Record<string, FakeHandler>) =>
  behind(routes, (origin) => ({ OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${origin}/v1` }))

const sdk = (gw: TestGateway, apiKey = 'sk-dev', options: { defaultHeaders?: Record<string, string> } = {}) =>
  new Anthropic({ baseURL: gw.origin, apiKey, maxRetries: 0, ...options })

const weatherTool: Anthropic.Tool = {
  name: 'get_weather',
  description: 'Get the current weather in a given location',
  input_schema: {
    type: 'object',
    properties: { location: { type: 'string' } },
    required: ['location'],
  },
}

describe('/v1/messages against the mock', () => {
  it('messages.create answers a message, with X-Generation-Id and a record under api /v1/messages', async () => {
    const gw = await gateway()
    const { data, response } = await sdk(gw)
      .messages.create({
        model: 'mock/chat',
        max_tokens: 200,
        messages: [{ role: 'user', content: 'hello' }],
      })
      .withResponse()
    expect(data).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'mock/chat',
      stop_reason: 'end_turn',
    })
    expect(data.content).toEqual([{ type: 'text', text: expect.stringContaining('Mock reply to "hello"') }])
    expect(data.usage.output_tokens).toBeGreaterThan(0)
    const id = response.headers.get('x-generation-id')
    expect(id).toBe(data.id)
    const record = await readGeneration(gw, id!)
    expect(record).toMatchObject({ api: '/v1/messages', model: 'mock/chat' })
  })

  it('messages.stream streams the text, usage in message_delta, and the generation is recorded', async () => {
    const gw = await gateway()
    const stream = sdk(gw).messages.stream({
      model: 'mock/chat',
      max_tokens: 200,
      messages: [{ role: 'user', content: 'stream please' }],
    })
    let text = ''
    stream.on('text', (t) => (text += t))
    const message = await stream.finalMessage()
    expect(text).toContain('Mock reply to "stream please"')
    expect(message.content).toEqual(
      [{ type: 'text', text, citations: undefined }].map(({ citations: _, ...b }) => b),
    )
    expect(message.usage.output_tokens).toBeGreaterThan(0)
    expect(message.stop_reason).toBe('end_turn')
    const record = await readGeneration(gw, message.id)
    expect(record).toMatchObject({ api: '/v1/messages', streamed: true })
  })

  it('messages.countTokens counts the prompt with our tokenizer, and says so', async () => {
    const gw = await gateway()
    const client = sdk(gw)
    const small = await client.messages.countTokens({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'hi' }],
    })
    const { data: big, response } = await client.messages
      .countTokens({
        model: 'mock/chat',
        system: 'You are a careful assistant who answers in full sentences.',
        messages: [{ role: 'user', content: 'hi, tell me everything about the weather in Paris today' }],
        tools: [weatherTool],
      })
      .withResponse()
    expect(small.input_tokens).toBeGreaterThan(0)
    expect(big.input_tokens).toBeGreaterThan(small.input_tokens + 10)
    expect(response.headers.get('x-junction-token-count')).toBe('estimate')
  })

  it('accepts x-api-key or a bearer token, anthropic-version, anthropic-beta and ?beta=true', async () => {
    const gw = await gateway()
    const body = JSON.stringify({
      model: 'mock/chat',
      max_tokens: 50,
      messages: [{ role: 'user', content: 'x' }],
    })
    const headers = {
      'content-type': 'application/json',
      'anthropic-version': '2023-06-01',
      'anthropic-beta': 'prompt-caching-2024-07-31',
    }
    const byKey = await fetch(`${gw.origin}/v1/messages?beta=true`, {
      method: 'POST',
      headers: { ...headers, 'x-api-key': 'sk-dev' },
      body,
    })
    const byBearer = await fetch(`${gw.origin}/v1/messages`, {
      method: 'POST',
      headers: { ...headers, authorization: 'Bearer sk-dev' },
      body,
    })
    expect([byKey.status, byBearer.status]).toEqual([200, 200])
    // The chat route keeps to bearer tokens.
    const chat = await fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'sk-dev' },
      body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'x' }] }),
    })
    expect(chat.status).toBe(401)
  })
})

describe('/v1/messages errors in Anthropic shape', () => {
  it('a bad key is an authentication_error with our request id', async () => {
    const gw = await gateway()
    const err = await sdk(gw, 'sk-wrong')
      .messages.create({ model: 'mock/chat', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError)
    const e = err as InstanceType<typeof Anthropic.AuthenticationError>
    expect(e.error).toMatchObject({
      type: 'error',
      error: { type: 'authentication_error', message: 'invalid API key' },
    })
    expect(e.requestID).toMatch(/^[0-9a-f]{32}$/)
    expect((e.error as { request_id?: string }).request_id).toBe(e.requestID)
  })

  it('a missing max_tokens is an invalid_request_error, and an unknown model a not_found_error', async () => {
    const gw = await gateway()
    const client = sdk(gw)
    const missing = await client.messages
      .create({
        model: 'mock/chat',
        messages: [{ role: 'user', content: 'x' }],
      } as unknown as Anthropic.MessageCreateParamsNonStreaming)
      .catch((e: unknown) => e)
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError)
    expect((missing as ApiError).error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: 'max_tokens: Field required' },
    })
    const unknown = await client.messages
      .create({ model: 'nobody/model', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError)
    expect((unknown as ApiError).error).toMatchObject({ error: { type: 'not_found_error' } })
  })

  it('402 without credits is a billing_error, and nothing reaches the upstream', async () => {
    const adminKey = 'admin-key-for-tests-0123456789'
    const gw = await gateway({ GATEWAY_ADMIN_KEY: adminKey })
    const admin = { authorization: `Bearer ${adminKey}`, 'content-type': 'application/json' }
    const created = await fetch(`${gw.origin}/admin/accounts`, {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ id: 'broke', credits: 0 }),
    })
    expect(created.status).toBe(201)
    const keyRes = await fetch(`${gw.origin}/admin/accounts/broke/keys`, {
      method: 'POST',
      headers: admin,
      body: '{}',
    })
    const { key } = (await keyRes.json()) as { key: string }
    const err = await sdk(gw, key)
      .messages.create({ model: 'mock/chat', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.APIError)
    expect((err as ApiError).status).toBe(402)
    expect((err as ApiError).error).toMatchObject({ type: 'error', error: { type: 'billing_error' } })
  })

  it('an upstream 429 is a rate_limit_error with its Retry-After', async () => {
    const { client } = await anthropicUpstream({
      'POST /v1/messages': (_req, res) =>
        sendJson(res, 429, readJsonFixture('anthropic/rate-limit-429.json'), { 'retry-after': '30' }),
    })
    const err = await client.messages
      .create({ model: CLAUDE, max_tokens: 10, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.RateLimitError)
    const e = err as ApiError
    expect(e.error).toMatchObject({ type: 'error', error: { type: 'rate_limit_error' } })
    expect(e.headers?.get('retry-after')).toBe('30')
  })
})

describe('/v1/messages in front of an Anthropic upstream', () => {
  it('passes the request through whole: cache_control, thinking signatures, extra fields and anthropic-beta', async () => {
    const { fake, client } = await anthropicUpstream({
      'POST /v1/messages': jsonFile('anthropic/thinking-parallel-tools.json'),
    })
    const params = {
      model: CLAUDE,
      max_tokens: 4096,
      system: [
        {
          type: 'text' as const,
          text: 'You are a coding agent. '.repeat(20),
          cache_control: { type: 'ephemeral' as const },
        },
      ],
      tools: [{ ...weatherTool, cache_control: { type: 'ephemeral' as const } }],
      thinking: { type: 'enabled' as const, budget_tokens: 2048 },
      messages: [
        { role: 'user' as const, content: 'Weather in Paris?' },
        {
          role: 'assistant' as const,
          content: [
            { type: 'thinking' as const, thinking: 'Use the tool.', signature: 'EqQBCgIYAhIM-signature' },
            { type: 'tool_use' as const, id: 'toolu_01', name: 'get_weather', input: { location: 'Paris' } },
          ],
        },
        {
          role: 'user' as const,
          content: [
            {
              type: 'tool_result' as const,
              tool_use_id: 'toolu_01',
              content: '18C',
              cache_control: { type: 'ephemeral' as const },
            },
          ],
        },
      ],
      context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
    }
    const answer = await client.messages.create(params as Anthropic.MessageCreateParamsNonStreaming, {
      headers: { 'anthropic-beta': 'context-management-2025-06-27' },
    })
    const upstream = fake.requests[0]!
    const { model: _model, ...rest } = params
    expect(upstream.body).toEqual({ ...rest, model: 'claude-sonnet-4-5' })
    expect(upstream.headers['anthropic-beta']).toBe('context-management-2025-06-27')
    expect(upstream.headers['x-api-key']).toBe(UPSTREAM_KEY)
    // The answer's blocks come back as Anthropic sent them, signatures included.
    const fixture = readJsonFixture('anthropic/thinking-parallel-tools.json') as { content: unknown[] }
    expect(answer.content).toEqual(fixture.content)
  })

  it('streams thinking with its signature unchanged', async () => {
    const { client } = await anthropicUpstream({ 'POST /v1/messages': sseFile('anthropic/thinking.sse') })
    const stream = client.messages.stream({
      model: CLAUDE,
      max_tokens: 4096,
      thinking: { type: 'enabled', budget_tokens: 2048 },
      messages: [{ role: 'user', content: 'GCD of 1071 and 462?' }],
    })
    const signatures: string[] = []
    stream.on('signature', (s) => signatures.push(s))
    const message = await stream.finalMessage()
    expect(message.content[0]).toMatchObject({
      type: 'thinking',
      thinking: expect.stringContaining('So GCD is 21.'),
      signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
    })
    expect(signatures).toEqual(['EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds'])
    expect(message.content[1]).toMatchObject({
      type: 'text',
      text: 'The greatest common divisor of 1071 and 462 is **21**.',
    })
    expect(message.usage).toMatchObject({ input_tokens: 41, output_tokens: 178 })
  })

  it('messages.countTokens asks the Anthropic upstream, and estimates when that call fails', async () => {
    const { fake, client } = await anthropicUpstream({
      'POST /v1/messages/count_tokens': (_req, res) => sendJson(res, 200, { input_tokens: 2095 }),
    })
    const params = {
      model: CLAUDE,
      system: [{ type: 'text' as const, text: 'Be brief.', cache_control: { type: 'ephemeral' as const } }],
      tools: [weatherTool],
      messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    }
    const { data, response } = await client.messages.countTokens(params).withResponse()
    expect(data).toEqual({ input_tokens: 2095 })
    expect(response.headers.get('x-junction-token-count')).toBe('upstream')
    expect(fake.requests[0]!.body).toEqual({ ...params, model: 'claude-sonnet-4-5' })
    fake.setHandler('POST /v1/messages/count_tokens', (_req, res) =>
      sendJson(res, 500, { type: 'error', error: { type: 'api_error', message: 'Internal' } }),
    )
    const { data: estimated, response: fallback } = await client.messages.countTokens(params).withResponse()
    expect(estimated.input_tokens).toBeGreaterThan(0)
    expect(fallback.headers.get('x-junction-token-count')).toBe('estimate')
  })

  it('a streamed tool-use round trip: the tool call, then its result sent back upstream', async () => {
    const { fake, client } = await anthropicUpstream({
      'POST /v1/messages': sseFile('anthropic/tool-use.sse'),
    })
    const first = await client.messages
      .stream({
        model: CLAUDE,
        max_tokens: 1024,
        tools: [weatherTool],
        messages: [{ role: 'user', content: 'Weather in SF?' }],
      })
      .finalMessage()
    expect(first.stop_reason).toBe('tool_use')
    const call = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!
    expect(call).toMatchObject({
      id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6',
      name: 'get_weather',
      input: expect.objectContaining({ location: expect.any(String) }),
    })
    fake.setHandler('POST /v1/messages', sseFile('anthropic/text.sse'))
    const second = await client.messages
      .stream({
        model: CLAUDE,
        max_tokens: 1024,
        tools: [weatherTool],
        messages: [
          { role: 'user', content: 'Weather in SF?' },
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: '15 degrees' }] },
        ],
      })
      .finalMessage()
    expect(second.content).toEqual([{ type: 'text', text: 'Hello!' }])
    const sent = sentBody(fake, 1)
    expect(sent.messages[1].content).toEqual(JSON.parse(JSON.stringify(first.content)))
    expect(sent.messages[2].content).toEqual([
      { type: 'tool_result', tool_use_id: call.id, content: '15 degrees' },
    ])
  })
})

const toolCallCompletion = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1741569952,
  model: 'gpt-4o-mini',
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_abc',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"location":"Paris"}' },
          },
        ],
      },
      logprobs: null,
      finish_reason: 'tool_calls',
    },
  ],
  usage: {
    prompt_tokens: 50,
    completion_tokens: 10,
    total_tokens: 60,
    prompt_tokens_details: { cached_tokens: 20 },
  },
}

const chunk = (delta: object, finish: string | null = null) =>
  JSON.stringify({
    id: 'c1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })

describe('/v1/messages in front of an OpenAI-compatible upstream', () => {
  it('translates a tool-use round trip both ways', async () => {
    const { fake, client } = await openaiUpstream({
      'POST /v1/chat/completions': (_r, res) => sendJson(res, 200, toolCallCompletion),
    })
    const first = await client.messages.create({
      model: GPT,
      max_tokens: 500,
      system: 'Be brief.',
      tools: [weatherTool],
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    })
    expect(first.stop_reason).toBe('tool_use')
    expect(first.content).toEqual([
      { type: 'tool_use', id: 'call_abc', name: 'get_weather', input: { location: 'Paris' } },
    ])
    expect(first.usage).toMatchObject({ input_tokens: 30, cache_read_input_tokens: 20, output_tokens: 10 })
    const sent = sentBody(fake, 0)
    expect(sent.messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Paris?' },
    ])
    expect(sent.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: weatherTool.description,
          parameters: weatherTool.input_schema,
        },
      },
    ])
    expect(sent.tool_choice).toBe('required')
    expect(sent.max_tokens ?? sent.max_completion_tokens).toBe(500)

    fake.setHandler('POST /v1/chat/completions', jsonFile('openai-compat/completion.json'))
    const second = await client.messages.create({
      model: GPT,
      max_tokens: 500,
      tools: [weatherTool],
      messages: [
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_abc', content: '18C' },
            { type: 'text', text: 'Thanks' },
          ],
        },
      ],
    })
    expect(second.content).toEqual([{ type: 'text', text: 'Hello! How can I assist you today?' }])
    expect(sentBody(fake, 1).messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_abc',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"location":"Paris"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '18C' },
      { role: 'user', content: [{ type: 'text', text: 'Thanks' }] },
    ])
  })

  it('streams text and a tool call as Anthropic events', async () => {
    const { fake, client } = await openaiUpstream({
      'POST /v1/chat/completions': (_r, res) =>
        sendSse(res, [
          chunk({ role: 'assistant', content: '' }),
          chunk({ content: 'Let me check.' }),
          chunk({
            tool_calls: [
              { index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } },
            ],
          }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: '{"location":' } }] }),
          chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
          chunk({}, 'tool_calls'),
          JSON.stringify({
            id: 'c1',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'gpt-4o-mini',
            choices: [],
            usage: { prompt_tokens: 40, completion_tokens: 9, total_tokens: 49 },
          }),
          '[DONE]',
        ]),
    })
    const message = await client.messages
      .stream({
        model: GPT,
        max_tokens: 300,
        tools: [weatherTool],
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
      })
      .finalMessage()
    expect(message.content).toEqual([
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { location: 'Paris' } },
    ])
    expect(message.stop_reason).toBe('tool_use')
    expect(message.usage).toMatchObject({ input_tokens: 40, output_tokens: 9 })
    expect(sentBody(fake, 0).stream).toBe(true)
  })

  it('an image block reaches the upstream as an image_url part', async () => {
    const { fake, client } = await openaiUpstream({
      'POST /v1/chat/completions': jsonFile('openai-compat/completion.json'),
    })
    await client.messages.create({
      model: GPT,
      max_tokens: 100,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'text', text: 'What is this?' },
          ],
        },
      ],
    })
    expect(sentBody(fake, 0).messages[0].content).toEqual([
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
      { type: 'text', text: 'What is this?' },
    ])
  })
})

describe('/v1/messages: streams that fail, reasoning from other providers, Gemini', () => {
  it('an upstream error after the stream started is an Anthropic error event, never a silent end', async () => {
    const { client } = await anthropicUpstream({
      'POST /v1/messages': sseFile('anthropic/error-mid-stream.sse'),
    })
    const stream = client.messages.stream({
      model: CLAUDE,
      max_tokens: 100,
      messages: [{ role: 'user', content: 'x' }],
    })
    let text = ''
    stream.on('text', (t) => (text += t))
    const err = await stream.finalMessage().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(Anthropic.APIError)
    expect((err as ApiError).error).toMatchObject({ type: 'error', error: { type: 'api_error' } })
    expect(text).not.toBe('')
  })

  it('reasoning of an OpenAI-compatible upstream streams as a thinking block', async () => {
    const { client } = await openaiUpstream({
      'POST /v1/chat/completions': sseFile('openai-compat/deepseek-reasoning.sse'),
    })
    const message = await client.messages
      .stream({
        model: GPT,
        max_tokens: 3000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: [{ role: 'user', content: 'Think first.' }],
      })
      .finalMessage()
    expect(message.content.map((b) => b.type)).toEqual(['thinking', 'text'])
    expect(message.content[0]).toMatchObject({ type: 'thinking', thinking: expect.stringContaining('Think') })
    expect(message.content[1]).toMatchObject({ type: 'text', text: expect.stringContaining('Answer') })
  })

  it('messages.countTokens asks Gemini countTokens for a Gemini model, over the translated request', async () => {
    const { fake, client } = await behind(
      {
        'POST /v1beta/models/gemini-2.5-flash:countTokens': (_req, res) =>
          sendJson(res, 200, {
            totalTokens: 1234,
            promptTokensDetails: [{ modality: 'TEXT', tokenCount: 1234 }],
          }),
      },
      (origin) => ({ GEMINI_API_KEY: UPSTREAM_KEY, GEMINI_BASE_URL: origin }),
    )
    const params = {
      model: 'google/gemini-2.5-flash',
      system: 'Be brief.',
      tools: [weatherTool],
      messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
    }
    const { data, response } = await client.messages.countTokens(params).withResponse()
    expect(data).toEqual({ input_tokens: 1234 })
    expect(response.headers.get('x-junction-token-count')).toBe('upstream')
    const sent = sentBody(fake, 0).generateContentRequest
    expect(sent.model).toBe('models/gemini-2.5-flash')
    expect(sent.systemInstruction).toEqual({ parts: [{ text: 'Be brief.' }] })
    expect(sent.contents).toEqual([{ role: 'user', parts: [{ text: 'Weather in Paris?' }] }])
    expect(sent.tools[0].functionDeclarations[0].name).toBe('get_weather')
    expect(fake.requests[0]!.headers['x-goog-api-key']).toBe(UPSTREAM_KEY)

    fake.setHandler('POST /v1beta/models/gemini-2.5-flash:countTokens', (_req, res) =>
      sendJson(res, 503, { error: { code: 503, message: 'overloaded', status: 'UNAVAILABLE' } }),
    )
    const { data: estimated, response: fallback } = await client.messages.countTokens(params).withResponse()
    expect(estimated.input_tokens).toBeGreaterThan(0)
    expect(fallback.headers.get('x-junction-token-count')).toBe('estimate')
  })

  it('Gemini: a tool round trip gives the thought signature back to Gemini unchanged', async () => {
    let turn = 0
    const { fake, client } = await behind(
      {
        'POST /v1beta/models/gemini-3-pro-preview:generateContent': (_req, res) =>
          sendJson(
            res,
            200,
            readJsonFixture(`gemini/${turn++ === 0 ? 'parallel-function-calls.json' : 'completion.json'}`),
          ),
      },
      (origin) => ({ GEMINI_API_KEY: UPSTREAM_KEY, GEMINI_BASE_URL: origin }),
    )
    const model = 'google/gemini-3-pro-preview'
    const ask: Anthropic.MessageParam = { role: 'user', content: 'Weather in Paris and Tokyo?' }
    const first = await client.messages.create({
      model,
      max_tokens: 1000,
      tools: [weatherTool],
      messages: [ask],
    })
    expect(first.stop_reason).toBe('tool_use')
    const calls = first.content.filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')
    expect(calls.map((c) => c.input)).toEqual([{ location: 'Paris, France' }, { location: 'Tokyo, Japan' }])
    const second = await client.messages.create({
      model,
      max_tokens: 1000,
      tools: [weatherTool],
      messages: [
        ask,
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: calls.map((c) => ({ type: 'tool_result' as const, tool_use_id: c.id, content: '20C' })),
        },
      ],
    })
    expect(second.content.map((b) => b.type)).toContain('text')
    const modelTurn = sentBody(fake, 1).contents[1]
    expect(modelTurn.parts[0]).toMatchObject({
      functionCall: { name: 'get_weather', args: { location: 'Paris, France' } },
      thoughtSignature: 'CiQBVKhc7oDnVvJ4Zq5yVqwnHGdOpd0Xq4xX',
    })
    expect(sentBody(fake, 1).contents[2].parts).toHaveLength(2)
  })

  it('Gemini: a streamed answer with thought summaries comes as a thinking block, then the text and its signature', async () => {
    const { fake, client } = await behind(
      { 'POST /v1beta/models/gemini-2.5-flash:streamGenerateContent': sseFile('gemini/thinking.sse') },
      (origin) => ({ GEMINI_API_KEY: UPSTREAM_KEY, GEMINI_BASE_URL: origin }),
    )
    const message = await client.messages
      .stream({
        model: 'google/gemini-2.5-flash',
        max_tokens: 16384,
        thinking: { type: 'enabled', budget_tokens: 2048 },
        messages: [{ role: 'user', content: 'GCD of 1071 and 462?' }],
      })
      .finalMessage()
    // Gemini's thought signature (on its last part) travels as a redacted_thinking block.
    expect(message.content.map((b) => b.type)).toEqual(['thinking', 'text', 'redacted_thinking'])
    expect(message.content[1]).toMatchObject({ text: 'The GCD of 1071 and 462 is 21.' })
    expect(message.content[2]).toMatchObject({ data: expect.stringMatching(/^junction\.detail\.v1:/) })
    expect(sentBody(fake).generationConfig.thinkingConfig).toEqual({
      thinkingBudget: 2048,
      includeThoughts: true,
    })
  })

  it('a client that leaves mid-stream aborts the upstream call, and the generation is recorded', async () => {
    const { fake, gw, client } = await anthropicUpstream({
      'POST /v1/messages': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        // The answer starts, then the upstream goes quiet: only the client's leaving ends it.
        res.write(
          toAnthropicSse([
            {
              type: 'message_start',
              message: {
                id: 'msg_1',
                type: 'message',
                role: 'assistant',
                content: [],
                model: 'claude-sonnet-4-5',
                usage: { input_tokens: 5, output_tokens: 1 },
              },
            },
            { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
            { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Once upon' } },
          ]),
        )
      },
    })
    const stream = client.messages.stream({
      model: CLAUDE,
      max_tokens: 100,
      messages: [{ role: 'user', content: 'a story' }],
    })
    let id = ''
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_start') id = e.message.id
    })
    await new Promise((resolve) => stream.once('text', resolve))
    const aborted = fake.nextAbort()
    const ended = stream.done().catch((e: unknown) => e)
    stream.abort()
    await aborted
    expect(await ended).toBeInstanceOf(Anthropic.APIUserAbortError)
    expect(fake.abortedResponses).toBe(1)
    const record = await readGeneration(gw, id)
    expect(record).toMatchObject({ api: '/v1/messages', streamed: true, cancelled: true })
  })

  it('is billed like chat: the record carries the upstream usage and a cost', async () => {
    const { gw, client } = await anthropicUpstream({ 'POST /v1/messages': sseFile('anthropic/thinking.sse') })
    const { response } = await client.messages
      .create({ model: CLAUDE, max_tokens: 4096, stream: true, messages: [{ role: 'user', content: 'x' }] })
      .withResponse()
    const id = response.headers.get('x-generation-id')!
    expect(id).toMatch(/^gen-/)
    const record = await readGeneration(gw, id)
    expect(record).toMatchObject({
      api: '/v1/messages',
      streamed: true,
      usage: { prompt_tokens: 41, completion_tokens: 178 },
    })
    expect(record.usage.cost).toBeGreaterThan(0)
  })
})

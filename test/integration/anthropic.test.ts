import type { ServerResponse } from 'node:http'
import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import {
  jsonFile,
  sendJson,
  sentBody,
  sseFile,
  writeSseText,
  type FakeHandler,
  type SseReplay,
} from '../support/fake-upstream.ts'
import { readFixture, readJsonFixture } from '../support/fixtures.ts'
import { postJson, readGeneration, readSdkStream, startGatewayBehindFake } from '../support/gateway.ts'

// The listening gateway in front of a fake Anthropic Messages API on 127.0.0.1, driven by the
// official openai SDK exactly as an OpenAI user would drive it.

const UPSTREAM_KEY = 'sk-ant-api03-FAKE-test-key-0000000000'
const SLUG = 'anthropic/claude-sonnet-4-5'
const ROUTE = 'POST /v1/messages'

const setup = (handler: FakeHandler) =>
  startGatewayBehindFake({ [ROUTE]: handler }, (origin) => ({
    ANTHROPIC_API_KEY: UPSTREAM_KEY,
    ANTHROPIC_BASE_URL: origin,
  }))

const json = (name: string, status?: number) => jsonFile(`anthropic/${name}`, status)
const sse = (name: string, options?: SseReplay) => sseFile(`anthropic/${name}`, options)

const weatherTool: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a given location',
    parameters: {
      type: 'object',
      properties: {
        location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['location'],
    },
  },
}

describe('Anthropic behind the OpenAI API: blocking', () => {
  it('translates a system/developer multi-turn request with images, and the answer back', async () => {
    const { fake, client } = await setup(json('message.json'))
    const answer = await client.chat.completions.create({
      model: SLUG,
      messages: [
        { role: 'system', content: 'You are a helpful assistant.' },
        { role: 'developer', content: 'Answer in one sentence.' },
        { role: 'user', content: 'Hello there.' },
        { role: 'assistant', content: 'Hi, I am Claude. How can I help you?' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in these images?' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
            { type: 'image_url', image_url: { url: 'https://upload.wikimedia.org/ant.jpg', detail: 'low' } },
          ],
        },
      ],
      temperature: 1.5,
      stop: ['###'],
      max_completion_tokens: 1024,
      user: 'end-user-7',
      frequency_penalty: 0.2,
    })

    expect(fake.requests).toHaveLength(1)
    const req = fake.requests[0]!
    expect(req.headers['x-api-key']).toBe(UPSTREAM_KEY)
    expect(req.headers['anthropic-version']).toBe('2023-06-01')
    expect(req.headers.authorization).toBeUndefined()
    expect(req.body).toEqual({
      model: 'claude-sonnet-4-5',
      max_tokens: 1024,
      system: [
        { type: 'text', text: 'You are a helpful assistant.' },
        { type: 'text', text: 'Answer in one sentence.' },
      ],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Hello there.' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Hi, I am Claude. How can I help you?' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in these images?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://upload.wikimedia.org/ant.jpg' } },
          ],
        },
      ],
      // clamped from 1.5; frequency_penalty dropped (README)
      temperature: 1,
      stop_sequences: ['###'],
      metadata: { user_id: 'end-user-7' },
    })

    expect(answer.id).toMatch(/^gen-/)
    expect(answer.model).toBe(SLUG)
    expect(answer.choices[0]!.message).toMatchObject({ role: 'assistant', content: 'Hi! My name is Claude.' })
    expect(answer.choices[0]!.finish_reason).toBe('stop')
    expect(answer.usage).toMatchObject({ prompt_tokens: 2095, completion_tokens: 503, total_tokens: 2598 })
  })

  it('maps tools, tool_choice, parallel_tool_calls, json_schema and reasoning onto the request', async () => {
    const { fake, client } = await setup(json('thinking-parallel-tools.json'))
    const schema = {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
      additionalProperties: false,
    }
    await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'Weather in Paris and Tokyo?' }],
      tools: [weatherTool],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      response_format: { type: 'json_schema', json_schema: { name: 'city', schema, strict: true } },
      reasoning_effort: 'low',
      max_completion_tokens: 10_000,
      temperature: 0.2,
    })
    const body = sentBody(fake)
    expect(body.tools).toEqual([
      {
        name: 'get_weather',
        description: 'Get the current weather in a given location',
        input_schema: weatherTool.function.parameters,
      },
    ])
    expect(body.tool_choice).toEqual({ type: 'auto', disable_parallel_tool_use: true })
    expect(body.output_config).toEqual({ format: { type: 'json_schema', schema } })
    expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: 2000 })
    expect(body.max_tokens).toBe(10_000)
    // Anthropic refuses temperature with thinking on.
    expect(body).not.toHaveProperty('temperature')
  })

  it('returns thinking with signatures and parallel tool calls, and restores them on the next turn', async () => {
    let turn = 0
    const { fake, client } = await setup((_req, res) =>
      turn++ === 0
        ? sendJson(res, 200, readJsonFixture('anthropic/thinking-parallel-tools.json'))
        : sendJson(res, 200, readJsonFixture('anthropic/message.json')),
    )
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Weather in Paris and Tokyo?' },
    ]
    const first = await client.chat.completions.create({
      model: SLUG,
      messages,
      tools: [weatherTool],
      reasoning_effort: 'medium',
    })
    const message = first.choices[0]!.message as OpenAI.Chat.ChatCompletionMessage & {
      reasoning?: string
      reasoning_details?: unknown[]
    }
    expect(first.choices[0]!.finish_reason).toBe('tool_calls')
    expect(message.tool_calls?.map((t) => t.id)).toEqual([
      'toolu_01A09q90qw90lq917835lq9',
      'toolu_01B81k2j3k4j5k6j7k8j9k0',
    ])
    expect(message.reasoning).toBe(
      'The user wants weather in two cities; I can call the tool for both at once.',
    )
    expect(message.reasoning_details).toEqual([
      {
        type: 'reasoning.text',
        text: message.reasoning,
        signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
        format: 'anthropic-claude-v1',
        index: 0,
      },
    ])
    expect(first.usage).toMatchObject({
      prompt_tokens: 3087,
      completion_tokens: 146,
      prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 2051 },
    })

    // The client sends the assistant message back unchanged, with one tool result per call.
    messages.push(message as OpenAI.Chat.ChatCompletionMessageParam)
    messages.push({ role: 'tool', tool_call_id: 'toolu_01A09q90qw90lq917835lq9', content: '15°C, cloudy' })
    messages.push({ role: 'tool', tool_call_id: 'toolu_01B81k2j3k4j5k6j7k8j9k0', content: '22°C, sunny' })
    const second = await client.chat.completions.create({
      model: SLUG,
      messages,
      tools: [weatherTool],
      reasoning_effort: 'medium',
    })
    expect(second.choices[0]!.message.content).toBe('Hi! My name is Claude.')

    expect(sentBody(fake, 1).messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Weather in Paris and Tokyo?' }] },
      {
        role: 'assistant',
        content: [
          {
            type: 'thinking',
            thinking: 'The user wants weather in two cities; I can call the tool for both at once.',
            signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
          },
          { type: 'text', text: "I'll check both cities." },
          {
            type: 'tool_use',
            id: 'toolu_01A09q90qw90lq917835lq9',
            name: 'get_weather',
            input: { location: 'Paris, France' },
          },
          {
            type: 'tool_use',
            id: 'toolu_01B81k2j3k4j5k6j7k8j9k0',
            name: 'get_weather',
            input: { location: 'Tokyo, Japan' },
          },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01A09q90qw90lq917835lq9', content: '15°C, cloudy' },
          { type: 'tool_result', tool_use_id: 'toolu_01B81k2j3k4j5k6j7k8j9k0', content: '22°C, sunny' },
        ],
      },
    ])
  })

  it('records the usage, cache reads and writes included, on the generation record', async () => {
    const { client, gw } = await setup(json('thinking-parallel-tools.json'))
    const answer = await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'hi' }],
    })
    const rec = await readGeneration(gw, answer.id)
    expect(rec).toMatchObject({
      model: SLUG,
      provider: 'anthropic',
      streamed: false,
      finishReason: 'tool_calls',
      cost_source: 'upstream',
      usage: {
        prompt_tokens: 3087,
        completion_tokens: 146,
        total_tokens: 3233,
        prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 2051 },
      },
    })
    // claude-sonnet-4-5 list prices, USD per million: 12 fresh input × 3 + 1024 cache hits × 0.3 +
    // 2051 cache writes × 3.75 + 146 output × 15.
    expect(rec.usage.upstream_cost).toBeCloseTo((12 * 3 + 1024 * 0.3 + 2051 * 3.75 + 146 * 15) / 1e6, 12)
  })

  it('bills every compaction iteration, blocking and streamed (recorded: 682/1 320 reported, 61 067/1 912 used)', async () => {
    // claude-sonnet-4-5 list prices, USD per million: input 3, output 15.
    const cost = (61_067 * 3 + 1912 * 15) / 1e6
    const blocking = await setup(json('compaction.json'))
    const answer = await blocking.client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'and the museums?' }],
    })
    expect(answer.usage).toMatchObject({ prompt_tokens: 61_067, completion_tokens: 1912 })
    const rec = await readGeneration(blocking.gw, answer.id)
    expect(rec.usage).toMatchObject({ prompt_tokens: 61_067, completion_tokens: 1912 })
    expect(rec.usage.upstream_cost).toBeCloseTo(cost, 12)

    const streamed = await setup(sse('compaction.sse'))
    const { chunks } = await readSdkStream(
      streamed.client.chat.completions.create({
        model: SLUG,
        messages: [{ role: 'user', content: 'and the museums?' }],
        stream: true,
        stream_options: { include_usage: true },
      }),
    )
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 61_067, completion_tokens: 1912 })
    const srec = await readGeneration(streamed.gw, chunks[0]!.id)
    expect(srec).toMatchObject({ streamed: true, cost_source: 'upstream' })
    expect(srec.usage.upstream_cost).toBeCloseTo(cost, 12)
  })

  it('refuses logit_bias before anything reaches Anthropic', async () => {
    const { fake, client } = await setup(json('message.json'))
    const err = await client.chat.completions
      .create({ model: SLUG, messages: [{ role: 'user', content: 'hi' }], logit_bias: { '50256': -100 } })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({
      type: 'invalid_request_error',
      code: 'unsupported_parameter',
      param: 'logit_bias',
    })
    expect(fake.requests).toHaveLength(0)
  })
})

describe('Anthropic behind the OpenAI API: errors', () => {
  it('maps 529 overloaded to 502 and 429 to 429 with Retry-After', async () => {
    let status = 529
    const { gw } = await setup((_req, res) =>
      sendJson(
        res,
        status,
        readJsonFixture(`anthropic/${status === 529 ? 'overloaded-529.json' : 'rate-limit-429.json'}`),
        {
          'retry-after': '30',
        },
      ),
    )
    const post = () =>
      postJson(gw, '/v1/chat/completions', { model: SLUG, messages: [{ role: 'user', content: 'hi' }] })
    const overloaded = await post()
    expect(overloaded.status).toBe(502)
    expect(((await overloaded.json()) as { error: unknown }).error).toMatchObject({
      type: 'upstream_error',
      code: 'upstream_error',
      message: 'upstream anthropic is overloaded (529)',
    })
    status = 429
    const limited = await post()
    expect(limited.status).toBe(429)
    expect(limited.headers.get('retry-after')).toBe('30')
    expect(((await limited.json()) as { error: unknown }).error).toMatchObject({
      code: 'rate_limit_exceeded',
    })
  })

  it("passes Anthropic's message on for a request it rejects, as a 400", async () => {
    const { client } = await setup(json('invalid-request-400.json', 400))
    const err = await client.chat.completions
      .create({ model: SLUG, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as Error).message).toContain("String should match pattern '^[a-zA-Z0-9_-]+$'")
  })

  it('never leaks the upstream key when Anthropic refuses it', async () => {
    const { client } = await setup(json('authentication-401.json', 401))
    const err = await client.chat.completions
      .create({ model: SLUG, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e)
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
    expect(JSON.stringify((err as InstanceType<typeof OpenAI.APIError>).error)).not.toContain(UPSTREAM_KEY)
  })
})

describe('Anthropic behind the OpenAI API: streaming', () => {
  it('streams text as it arrives, with the usage chunk only when asked', async () => {
    const { client } = await setup(sse('text.sse'))
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    const stream = await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
      stream_options: { include_usage: true },
    })
    for await (const c of stream) chunks.push(c)
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(chunks.every((c) => c.model === SLUG)).toBe(true)
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello!')
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')
    expect(chunks.at(-1)!.choices).toEqual([])
    expect(chunks.at(-1)!.usage).toEqual({
      prompt_tokens: 25,
      completion_tokens: 15,
      total_tokens: 40,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    })

    const plain: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const c of await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
    }))
      plain.push(c)
    expect(plain.every((c) => c.choices.length === 1 && !c.usage)).toBe(true)
  })

  it('asks Anthropic for a stream', async () => {
    const { fake, client } = await setup(sse('text.sse'))
    for await (const _ of await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    })) {
      // drain
    }
    expect(sentBody(fake).stream).toBe(true)
    expect(fake.requests[0]!.headers.accept).toBe('text/event-stream')
  })

  it('streams a tool call whose argument deltas the SDK reassembles', async () => {
    const { client } = await setup(sse('tool-use.sse'))
    const final = await client.chat.completions
      .stream({ model: SLUG, messages: [{ role: 'user', content: 'Weather in SF?' }], tools: [weatherTool] })
      .finalChatCompletion()
    const choice = final.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.content).toBe("Okay, let's check the weather for San Francisco, CA:")
    expect(choice.message.tool_calls).toEqual([
      {
        id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6',
        type: 'function',
        function: {
          name: 'get_weather',
          arguments: '{"location": "San Francisco, CA", "unit": "fahrenheit"}',
        },
      },
    ])
  })

  it('streams thinking and parallel tool calls, and the signed detail goes back on the next turn', async () => {
    let turn = 0
    const { fake, client } = await setup((_req, res) =>
      turn++ === 0
        ? writeSseText(res, readFixture('anthropic/thinking-parallel-tools.sse'))
        : sendJson(res, 200, readJsonFixture('anthropic/message.json')),
    )
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Weather in Paris and Tokyo?' },
    ]
    const runner = client.chat.completions.stream({
      model: SLUG,
      messages,
      tools: [weatherTool],
      reasoning_effort: 'medium',
      stream_options: { include_usage: true },
    })
    let reasoning = ''
    runner.on('chunk', (c) => {
      reasoning += (c.choices[0]?.delta as { reasoning?: string } | undefined)?.reasoning ?? ''
    })
    const final = await runner.finalChatCompletion()
    const message = final.choices[0]!.message as OpenAI.Chat.ChatCompletionMessage & {
      reasoning_details?: unknown[]
    }
    expect(reasoning).toBe('The user wants weather in two cities; I can call the tool for both at once.')
    expect(
      message.tool_calls?.map((t) => (t.type === 'function' ? [t.id, JSON.parse(t.function.arguments)] : [])),
    ).toEqual([
      ['toolu_01A09q90qw90lq917835lq9', { location: 'Paris, France' }],
      ['toolu_01B81k2j3k4j5k6j7k8j9k0', { location: 'Tokyo, Japan' }],
    ])
    expect(message.reasoning_details).toEqual([
      expect.objectContaining({
        type: 'reasoning.text',
        signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
      }),
    ])
    expect(final.usage).toMatchObject({
      prompt_tokens: 3087,
      prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 2051 },
    })

    messages.push({ ...message, content: message.content ?? '' } as OpenAI.Chat.ChatCompletionMessageParam)
    messages.push({ role: 'tool', tool_call_id: 'toolu_01A09q90qw90lq917835lq9', content: '15°C' })
    messages.push({ role: 'tool', tool_call_id: 'toolu_01B81k2j3k4j5k6j7k8j9k0', content: '22°C' })
    await client.chat.completions.create({
      model: SLUG,
      messages,
      tools: [weatherTool],
      reasoning_effort: 'medium',
    })
    expect(sentBody(fake, 1).messages[1].content[0]).toEqual({
      type: 'thinking',
      thinking: 'The user wants weather in two cities; I can call the tool for both at once.',
      signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
    })
  })

  it('records a streamed generation with the upstream usage', async () => {
    const { client, gw } = await setup(sse('thinking.sse'))
    let id = ''
    for await (const c of await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'gcd?' }],
      stream: true,
    }))
      id = c.id
    const rec = await readGeneration(gw, id)
    expect(rec).toMatchObject({
      streamed: true,
      finishReason: 'stop',
      cost_source: 'upstream',
      usage: { prompt_tokens: 41, completion_tokens: 178 },
    })
    expect(rec.usage.completion_tokens_details.reasoning_tokens).toBeGreaterThan(0)
  })

  it('ends with an error event when Anthropic sends one mid-stream', async () => {
    const { client } = await setup(sse('error-mid-stream.sse'))
    const stream = await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    })
    const { content, error } = await readSdkStream(stream)
    expect(content).toBe('Partial')
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as Error).message).toMatch(/overloaded/)
  })

  it('turns an error event before any content into an HTTP error', async () => {
    const { gw } = await setup((_req, res) =>
      writeSseText(
        res,
        toAnthropicSse([{ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }]),
      ),
    )
    const res = await postJson(gw, '/v1/chat/completions', {
      model: SLUG,
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    })
    expect(res.status).toBe(502)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upstream_error')
  })

  it('reports a stream the provider cuts mid-way as an error, not a finished answer', async () => {
    const { client } = await setup(sse('tool-use.sse', { cutAfter: 6 }))
    const stream = await client.chat.completions.create({
      model: SLUG,
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    })
    const { chunks, error } = await readSdkStream(stream)
    const finishes = chunks.map((c) => c.choices[0]?.finish_reason ?? null)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect(finishes.every((f) => f === null)).toBe(true)
  })

  it('aborts the upstream request when the client disconnects mid-stream', async () => {
    let upstreamRes: ServerResponse | undefined
    const { fake, gw } = await setup(async (_req, res) => {
      upstreamRes = res
      // The events up to the first text, then silence: the client leaves during it.
      const events = readFixture('anthropic/text.sse').split('\n\n').slice(0, 4)
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(events.join('\n\n') + '\n\n')
      await new Promise<void>((resolve) => res.once('close', () => resolve()))
    })
    const controller = new AbortController()
    const res = await postJson(
      gw,
      '/v1/chat/completions',
      { model: SLUG, messages: [{ role: 'user', content: 'x' }], stream: true },
      controller.signal,
    )
    const reader = res.body!.getReader()
    await reader.read()
    const aborted = fake.nextAbort()
    controller.abort()
    await aborted
    expect(fake.abortedResponses).toBe(1)
    expect(upstreamRes?.destroyed).toBe(true)
  })
})

describe('Anthropic recorded defects, through the gateway with the SDK', () => {
  const ask = { model: SLUG, messages: [{ role: 'user' as const, content: 'go' }] }
  const argsOf = (chunks: OpenAI.Chat.ChatCompletionChunk[]) => {
    const args: string[] = []
    for (const c of chunks)
      for (const t of c.choices[0]?.delta.tool_calls ?? [])
        args[t.index] = (args[t.index] ?? '') + (t.function?.arguments ?? '')
    return args
  }

  it('a streamed tool call whose input arrives whole reassembles to JSON', async () => {
    const { client } = await setup(sse('tool-no-args.sse'))
    const { chunks, error } = await readSdkStream(client.chat.completions.create({ ...ask, stream: true }))
    expect(error).toBeUndefined()
    expect(argsOf(chunks)).toEqual(['{}', '{"player":"player1"}'])
    expect(chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean)).toEqual(['tool_calls'])
  })

  it('a message carried whole by message_start is translated, and finalChatCompletion works', async () => {
    const { client } = await setup(sse('whole-message-start.sse'))
    const final = await client.chat.completions.stream({ ...ask, stream: true }).finalChatCompletion()
    expect(final.choices[0]?.finish_reason).toBe('tool_calls')
    expect(final.choices[0]?.message.tool_calls?.[0]).toMatchObject({
      function: { name: 'roll_dice', arguments: '{"sides":6}' },
    })
  })

  it('a stream that ends without a stop reason is an error, never an empty answer', async () => {
    const { client, fake } = await setup(sse('no-stop-reason.sse'))
    const { chunks, error } = await readSdkStream(client.chat.completions.create({ ...ask, stream: true }))
    // Nothing was committed (only the role chunk was held), so it was retried once, then refused.
    expect(error).toMatchObject({ status: 502 })
    expect(chunks).toEqual([])
    expect(fake.requests).toHaveLength(2)
  })

  it('a second message_start inside an unfinished message ends the stream with an error event', async () => {
    const { client } = await setup(sse('second-message-start.sse'))
    const { chunks, error } = await readSdkStream(client.chat.completions.create({ ...ask, stream: true }))
    expect((error as Error).message).toMatch(/out of order: a second message_start/)
    expect(chunks.filter((c) => c.choices[0]?.delta.role === 'assistant')).toHaveLength(1)
    expect(chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []).filter((t) => t.id)).toHaveLength(1)
  })

  it('a repeated message_start with the open message’s id is ignored: the answer streams whole', async () => {
    const { client } = await setup(sse('duplicate-message-start.sse'))
    const { chunks, error } = await readSdkStream(client.chat.completions.create({ ...ask, stream: true }))
    expect(error).toBeUndefined()
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello again!')
    expect(chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean)).toEqual(['stop'])
  })

  it('reports Anthropic’s thinking tokens (blocking and streamed)', async () => {
    const blocking = await setup(json('thinking-tokens.json'))
    const answer = await blocking.client.chat.completions.create(ask)
    expect(answer.usage?.completion_tokens_details).toEqual({ reasoning_tokens: 139 })
    const streamed = await setup(sse('thinking-tokens.sse'))
    const { chunks } = await readSdkStream(
      streamed.client.chat.completions.create({
        ...ask,
        stream: true,
        stream_options: { include_usage: true },
      }),
    )
    expect(chunks.at(-1)?.usage?.completion_tokens_details).toEqual({ reasoning_tokens: 139 })
  })

  it('puts a refusal’s explanation in message.refusal and delta.refusal', async () => {
    const explanation = "This request asks for working malware, which I can't help with."
    const blocking = await setup(json('refusal-details.json'))
    const answer = await blocking.client.chat.completions.create(ask)
    expect(answer.choices[0]).toMatchObject({
      finish_reason: 'content_filter',
      message: { content: null, refusal: explanation },
    })
    const streamed = await setup(sse('refusal-stream.sse'))
    const { chunks } = await readSdkStream(streamed.client.chat.completions.create({ ...ask, stream: true }))
    expect(chunks.map((c) => c.choices[0]?.delta.refusal).filter(Boolean)).toEqual([explanation])
    expect(chunks.map((c) => c.choices[0]?.finish_reason).filter(Boolean)).toEqual(['content_filter'])
  })
})

import OpenAI from 'openai'
import { describe, expect, it } from 'vitest'
import { toGeminiSse } from '../support/fake-gemini.ts'
import {
  jsonFile,
  sendJson,
  sentBody,
  sseFile,
  writeSseText,
  type FakeHandler,
  type SseReplay,
} from '../support/fake-upstream.ts'
import { readJsonFixture } from '../support/fixtures.ts'
import { postJson, readGeneration, readSdkStream, startGatewayBehindFake } from '../support/gateway.ts'

// The listening gateway in front of a fake Gemini API (generativelanguage v1beta) on 127.0.0.1,
// driven by the official openai SDK exactly as an OpenAI user would drive it.

const UPSTREAM_KEY = 'AIzaSy-FAKE-test-key-000000000000000'
const FLASH = 'google/gemini-2.5-flash'
const PRO3 = 'google/gemini-3-pro-preview'
const EMBED = 'google/gemini-embedding-001'
const generate = (model: string) => `POST /v1beta/models/${model}:generateContent`
const streamGenerate = (model: string) => `POST /v1beta/models/${model}:streamGenerateContent`

const setup = (routes: Record<string, FakeHandler>) =>
  startGatewayBehindFake(routes, (origin) => ({ GEMINI_API_KEY: UPSTREAM_KEY, GEMINI_BASE_URL: origin }))

const json = (name: string, status?: number) => jsonFile(`gemini/${name}`, status)
const sse = (name: string, options?: SseReplay) => sseFile(`gemini/${name}`, options)

const weatherTool: OpenAI.Chat.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a given location',
    parameters: {
      type: 'object',
      properties: {
        location: { type: 'string' },
        unit: { type: ['string', 'null'], enum: ['c', 'f', null] },
      },
      required: ['location'],
      additionalProperties: false,
    },
  },
}

describe('Gemini behind the OpenAI API: blocking', () => {
  it('translates system, multi-turn and images, authenticates by header, and translates the answer', async () => {
    const { fake, client } = await setup({
      [generate('gemini-2.5-flash')]: json('completion.json'),
    })
    const answer = await client.chat.completions.create({
      model: FLASH,
      messages: [
        { role: 'system', content: 'You are a cat. Your name is Neko.' },
        { role: 'user', content: 'Hello there' },
        { role: 'assistant', content: 'Great to meet you. What would you like to know?' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in this picture?' },
            { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/4AAQSkZJRg==' } },
          ],
        },
      ],
      temperature: 1.5,
      top_p: 0.8,
      max_completion_tokens: 500,
      stop: ['\n\n'],
    })
    const req = fake.requests[0]!
    expect(req.url).toBe('/v1beta/models/gemini-2.5-flash:generateContent')
    expect(req.headers['x-goog-api-key']).toBe(UPSTREAM_KEY)
    expect(req.headers.authorization).toBeUndefined()
    expect(req.body).toEqual({
      systemInstruction: { parts: [{ text: 'You are a cat. Your name is Neko.' }] },
      contents: [
        { role: 'user', parts: [{ text: 'Hello there' }] },
        { role: 'model', parts: [{ text: 'Great to meet you. What would you like to know?' }] },
        {
          role: 'user',
          parts: [
            { text: 'What is in this picture?' },
            { inlineData: { mimeType: 'image/jpeg', data: '/9j/4AAQSkZJRg==' } },
          ],
        },
      ],
      generationConfig: { temperature: 1.5, topP: 0.8, maxOutputTokens: 500, stopSequences: ['\n\n'] },
    })
    expect(answer.model).toBe(FLASH)
    expect(answer.choices[0]!.message.content).toBe('1+1 equals 2.')
    expect(answer.choices[0]!.finish_reason).toBe('stop')
    expect(answer.usage).toMatchObject({ prompt_tokens: 15, completion_tokens: 6, total_tokens: 21 })
  })

  it('maps tools, tool_choice, JSON schema output and reasoning onto the request', async () => {
    const { fake, client } = await setup({
      [generate('gemini-2.5-flash')]: json('completion.json'),
    })
    await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [weatherTool],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'w', schema: { type: 'object', properties: { t: { type: 'number' } } } },
      },
      reasoning_effort: 'low',
    })
    const body = sentBody(fake)
    expect(body.tools).toEqual([
      {
        functionDeclarations: [
          {
            name: 'get_weather',
            description: 'Get the current weather in a given location',
            parameters: {
              type: 'OBJECT',
              properties: { location: { type: 'STRING' }, unit: { type: 'STRING', nullable: true } },
              required: ['location'],
            },
          },
        ],
      },
    ])
    expect(body.toolConfig).toEqual({
      functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['get_weather'] },
    })
    expect(body.generationConfig).toEqual({
      // No max_completion_tokens from the client: the bound its reservation assumed is sent.
      maxOutputTokens: 16384,
      responseMimeType: 'application/json',
      responseSchema: { type: 'OBJECT', properties: { t: { type: 'NUMBER' } } },
      thinkingConfig: { thinkingBudget: 1024, includeThoughts: true },
    })
  })

  it('gives parallel function calls ids, and sends them back with the thought signature on the next turn', async () => {
    let turn = 0
    const { fake, client } = await setup({
      [generate('gemini-3-pro-preview')]: (_req, res) =>
        sendJson(
          res,
          200,
          readJsonFixture(`gemini/${turn++ === 0 ? 'parallel-function-calls.json' : 'completion.json'}`),
        ),
    })
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'Weather in Paris and Tokyo?' },
    ]
    const first = await client.chat.completions.create({ model: PRO3, messages, tools: [weatherTool] })
    const message = first.choices[0]!.message as OpenAI.Chat.ChatCompletionMessage & {
      reasoning_details?: unknown[]
    }
    expect(first.choices[0]!.finish_reason).toBe('tool_calls')
    expect(message.tool_calls?.map((t) => t.id)).toEqual(['call_0_get_weather', 'call_1_get_weather'])
    expect(message.reasoning_details).toEqual([
      {
        type: 'reasoning.encrypted',
        data: 'CiQBVKhc7oDnVvJ4Zq5yVqwnHGdOpd0Xq4xX',
        id: 'call_0_get_weather',
        format: 'google-gemini-v1',
        index: 0,
      },
    ])
    expect(first.usage).toMatchObject({
      prompt_tokens: 120,
      completion_tokens: 96,
      prompt_tokens_details: { cached_tokens: 96 },
      completion_tokens_details: { reasoning_tokens: 64 },
    })

    messages.push(message as OpenAI.Chat.ChatCompletionMessageParam)
    messages.push({ role: 'tool', tool_call_id: 'call_1_get_weather', content: '{"temp": 22}' })
    messages.push({ role: 'tool', tool_call_id: 'call_0_get_weather', content: 'cloudy' })
    await client.chat.completions.create({ model: PRO3, messages, tools: [weatherTool] })
    expect(sentBody(fake, 1).contents).toEqual([
      { role: 'user', parts: [{ text: 'Weather in Paris and Tokyo?' }] },
      {
        role: 'model',
        parts: [
          {
            functionCall: { name: 'get_weather', args: { location: 'Paris, France' } },
            thoughtSignature: 'CiQBVKhc7oDnVvJ4Zq5yVqwnHGdOpd0Xq4xX',
          },
          { functionCall: { name: 'get_weather', args: { location: 'Tokyo, Japan' } } },
        ],
      },
      {
        role: 'user',
        parts: [
          { functionResponse: { name: 'get_weather', response: { temp: 22 } } },
          { functionResponse: { name: 'get_weather', response: { result: 'cloudy' } } },
        ],
      },
    ])
  })

  it('maps a safety block to content_filter and a blocked prompt too', async () => {
    let name = 'safety.json'
    const { client } = await setup({
      [generate('gemini-2.5-flash')]: (_req, res) => sendJson(res, 200, readJsonFixture(`gemini/${name}`)),
    })
    const safety = await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'x' }],
    })
    expect(safety.choices[0]).toMatchObject({ finish_reason: 'content_filter', message: { content: '' } })
    name = 'prompt-blocked.json'
    const blocked = await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'x' }],
    })
    expect(blocked.choices[0]!.finish_reason).toBe('content_filter')
  })

  it('records the usage on the generation record, priced', async () => {
    const { client, gw } = await setup({
      [generate('gemini-3-pro-preview')]: json('parallel-function-calls.json'),
    })
    const answer = await client.chat.completions.create({
      model: PRO3,
      messages: [{ role: 'user', content: 'x' }],
    })
    const rec = await readGeneration(gw, answer.id)
    expect(rec).toMatchObject({
      provider: 'google',
      finishReason: 'tool_calls',
      cost_source: 'upstream',
      usage: {
        prompt_tokens: 120,
        completion_tokens: 96,
        prompt_tokens_details: { cached_tokens: 96 },
        completion_tokens_details: { reasoning_tokens: 64 },
      },
    })
    // gemini-3-pro-preview list prices, USD per million: 24 fresh × 2 + 96 cached × 0.2 + 96 output × 12.
    expect(rec.usage.upstream_cost).toBeCloseTo((24 * 2 + 96 * 0.2 + 96 * 12) / 1e6, 12)
  })

  it('refuses logprobs before anything reaches Gemini', async () => {
    const { fake, client } = await setup({
      [generate('gemini-2.5-flash')]: json('completion.json'),
    })
    const err = await client.chat.completions
      .create({ model: FLASH, messages: [{ role: 'user', content: 'x' }], logprobs: true })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({
      code: 'unsupported_parameter',
      param: 'logprobs',
    })
    expect(fake.requests).toHaveLength(0)
  })
})

describe('Gemini behind the OpenAI API: errors', () => {
  it('maps 429 RESOURCE_EXHAUSTED to 429 with Retry-After from RetryInfo', async () => {
    const { gw } = await setup({ [generate('gemini-2.5-flash')]: json('error-429.json', 429) })
    const res = await postJson(gw, '/v1/chat/completions', {
      model: FLASH,
      messages: [{ role: 'user', content: 'x' }],
    })
    expect(res.status).toBe(429)
    expect(res.headers.get('retry-after')).toBe('28')
  })

  it('maps a refused key to 502 without echoing it, and 503 UNAVAILABLE to 502', async () => {
    let name = 'error-key-invalid.json'
    let status = 400
    const { client } = await setup({
      [generate('gemini-2.5-flash')]: (_req, res) => sendJson(res, status, readJsonFixture(`gemini/${name}`)),
    })
    const refused = await client.chat.completions
      .create({ model: FLASH, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect((refused as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
    expect(JSON.stringify((refused as InstanceType<typeof OpenAI.APIError>).error)).not.toContain(
      UPSTREAM_KEY,
    )
    name = 'error-503.json'
    status = 503
    const overloaded = await client.chat.completions
      .create({ model: FLASH, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e)
    expect((overloaded as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
  })
})

describe('Gemini behind the OpenAI API: streaming', () => {
  it('streams text from the CRLF-framed SSE endpoint, with the usage chunk when asked', async () => {
    const { fake, client } = await setup({ [streamGenerate('gemini-2.5-flash')]: sse('text.sse') })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const c of await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'Why is the sky blue?' }],
      stream: true,
      stream_options: { include_usage: true },
    }))
      chunks.push(c)
    expect(fake.requests[0]!.url).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse')
    expect(fake.requests[0]!.url).not.toContain('key=')
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe(
      'The sky appears blue because of Rayleigh scattering.',
    )
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop')
    expect(chunks.at(-1)).toMatchObject({
      choices: [],
      usage: {
        prompt_tokens: 8,
        completion_tokens: 37,
        total_tokens: 45,
        completion_tokens_details: { reasoning_tokens: 25 },
      },
    })
  })

  it('streams parallel function calls that the SDK reassembles, and usage sent after the finish', async () => {
    const { client } = await setup({
      [streamGenerate('gemini-3-pro-preview')]: sse('parallel-function-calls.sse'),
    })
    const final = await client.chat.completions
      .stream({
        model: PRO3,
        messages: [{ role: 'user', content: 'Weather in Paris and Tokyo?' }],
        tools: [weatherTool],
        stream_options: { include_usage: true },
      })
      .finalChatCompletion()
    const choice = final.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message.tool_calls).toEqual([
      {
        id: 'call_0_get_weather',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"location":"Paris, France"}' },
      },
      {
        id: 'call_1_get_weather',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"location":"Tokyo, Japan"}' },
      },
    ])
    expect((choice.message as { reasoning_details?: unknown }).reasoning_details).toEqual([
      expect.objectContaining({ type: 'reasoning.encrypted', id: 'call_0_get_weather' }),
    ])
    expect(final.usage).toMatchObject({ prompt_tokens: 120, completion_tokens: 96 })
  })

  it('streams thought summaries as reasoning when reasoning is asked for', async () => {
    const { fake, client } = await setup({
      [streamGenerate('gemini-2.5-flash')]: sse('thinking.sse'),
    })
    let reasoning = ''
    let content = ''
    for await (const c of await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'GCD of 1071 and 462?' }],
      stream: true,
      reasoning: { enabled: true, max_tokens: 2048 },
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming)) {
      reasoning += (c.choices[0]?.delta as { reasoning?: string } | undefined)?.reasoning ?? ''
      content += c.choices[0]?.delta.content ?? ''
    }
    expect(sentBody(fake).generationConfig).toEqual({
      maxOutputTokens: 16384,
      thinkingConfig: { thinkingBudget: 2048, includeThoughts: true },
    })
    expect(reasoning).toMatch(/^\*\*Analyzing the request\*\*/)
    expect(content).toBe('The GCD of 1071 and 462 is 21.')
  })

  it('records a streamed generation with the upstream usage', async () => {
    const { client, gw } = await setup({
      [streamGenerate('gemini-2.5-flash')]: sse('thinking.sse'),
    })
    let id = ''
    for await (const c of await client.chat.completions.create({
      model: FLASH,
      messages: [{ role: 'user', content: 'x' }],
      stream: true,
    }))
      id = c.id
    expect(await readGeneration(gw, id)).toMatchObject({
      streamed: true,
      finishReason: 'stop',
      cost_source: 'upstream',
      usage: {
        prompt_tokens: 20,
        completion_tokens: 281,
        completion_tokens_details: { reasoning_tokens: 270 },
      },
    })
  })

  it('assembles function-call arguments Vertex streams in pieces (partialArgs, willContinue)', async () => {
    const { client } = await setup({
      [streamGenerate('gemini-3-pro-preview')]: sse('vertex-streamed-args.sse'),
    })
    const final = await client.chat.completions
      .stream({
        model: PRO3,
        messages: [{ role: 'user', content: 'Lasagna, then a timer' }],
        tools: [weatherTool],
        stream_options: { include_usage: true },
      })
      .finalChatCompletion()
    const choice = final.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    const calls = (choice.message.tool_calls ?? []) as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[]
    expect(calls.map((t) => [t.id, t.function.name])).toEqual([
      ['call_0_cook_recipe', 'cook_recipe'],
      ['call_1_set_timer', 'set_timer'],
    ])
    expect(JSON.parse(calls[0]!.function.arguments)).toMatchObject({
      recipe: {
        name: 'Lasagna "al forno"',
        ingredients: [{ name: 'Noodles', grams: 500 }, { name: 'Ricotta' }],
      },
    })
    expect(calls[1]!.function.arguments).toBe('{"minutes":45}')
    expect(final.usage).toMatchObject({ prompt_tokens: 40, completion_tokens: 140 })
  })

  it('reports a stream cut before its last event as an error', async () => {
    const { client } = await setup({
      [streamGenerate('gemini-2.5-flash')]: sse('text.sse', { cutAfter: 2 }),
    })
    const { content, error: err } = await readSdkStream(
      client.chat.completions.create({
        model: FLASH,
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    )
    expect(content).toBe('The sky appears blue because of Rayleigh')
    expect(err).toBeInstanceOf(OpenAI.APIError)
  })

  it('reports a stream that ends cleanly without a finishReason as an error too', async () => {
    const partial = toGeminiSse(
      [readJsonFixture('gemini/max-tokens.json')].map((r) => ({
        ...(r as object),
        candidates: [{ content: { parts: [{ text: 'Once' }] } }],
      })),
    )
    const { client } = await setup({
      [streamGenerate('gemini-2.5-flash')]: (_req, res) => writeSseText(res, partial),
    })
    const { error: err } = await readSdkStream(
      client.chat.completions.create({
        model: FLASH,
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    )
    expect((err as Error).message).toMatch(/stream ended before the answer was complete/)
  })

  it('ends with an error event when Gemini sends an error object mid-stream', async () => {
    const text = toGeminiSse([
      { candidates: [{ content: { role: 'model', parts: [{ text: 'Partial' }] } }] },
      readJsonFixture('gemini/error-503.json'),
    ])
    const { client } = await setup({
      [streamGenerate('gemini-2.5-flash')]: (_req, res) => writeSseText(res, text),
    })
    const { content, error: err } = await readSdkStream(
      client.chat.completions.create({
        model: FLASH,
        messages: [{ role: 'user', content: 'x' }],
        stream: true,
      }),
    )
    expect(content).toBe('Partial')
    expect((err as Error).message).toMatch(/failed mid-stream \(UNAVAILABLE\)/)
  })

  it('aborts the upstream request when the client disconnects mid-stream', async () => {
    const { fake, gw } = await setup({
      [streamGenerate('gemini-2.5-flash')]: sse('text.sse', { delayMs: 10_000 }),
    })
    const controller = new AbortController()
    const res = await postJson(
      gw,
      '/v1/chat/completions',
      { model: FLASH, messages: [{ role: 'user', content: 'x' }], stream: true },
      controller.signal,
    )
    await res.body!.getReader().read()
    const aborted = fake.nextAbort()
    controller.abort()
    await aborted
    expect(fake.abortedResponses).toBe(1)
  })
})

describe('Gemini embeddings', () => {
  it('embeds through /routed/v1/embeddings with batchEmbedContents and outputDimensionality', async () => {
    const { fake, gw } = await setup({
      'POST /v1beta/models/gemini-embedding-001:batchEmbedContents': json('batch-embed.json'),
    })
    const res = await postJson(gw, '/routed/v1/embeddings', {
      model: EMBED,
      input: ['first text', 'second text'],
      dimensions: 4,
      input_type: 'search_document',
    })
    expect(res.status).toBe(200)
    expect(fake.requests[0]!.url).toBe('/v1beta/models/gemini-embedding-001:batchEmbedContents')
    expect(fake.requests[0]!.headers['x-goog-api-key']).toBe(UPSTREAM_KEY)
    expect(sentBody(fake)).toEqual({
      requests: ['first text', 'second text'].map((text) => ({
        model: 'models/gemini-embedding-001',
        content: { parts: [{ text }] },
        taskType: 'RETRIEVAL_DOCUMENT',
        outputDimensionality: 4,
      })),
    })
    expect(await res.json()).toMatchObject({
      object: 'list',
      model: EMBED,
      data: [
        { object: 'embedding', index: 0, embedding: [0.0123, -0.0456, 0.0789, 0.0012] },
        { object: 'embedding', index: 1, embedding: [-0.0321, 0.0654, -0.0987, 0.0021] },
      ],
      usage: { prompt_tokens: 6, total_tokens: 6 },
    })
  })

  it('works with the SDK, base64 included', async () => {
    const { client } = await setup({
      'POST /v1beta/models/gemini-embedding-001:batchEmbedContents': json('batch-embed.json'),
    })
    // The SDK asks for base64 by default and decodes it: the floats must come back.
    const out = await client.embeddings.create({ model: EMBED, input: ['a', 'b'] })
    expect(out.data[0]!.embedding.map((f) => Number(f.toFixed(4)))).toEqual([0.0123, -0.0456, 0.0789, 0.0012])
  })
})

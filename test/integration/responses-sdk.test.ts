import OpenAI from 'openai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import {
  jsonFile,
  sendJson,
  sendSse,
  sentBody,
  sseFile,
  writeSseText,
  type FakeHandler,
} from '../support/fake-upstream.ts'
import { readGeneration, startGateway, startGatewayBehindFake, type TestGateway } from '../support/gateway.ts'

// POST /v1/responses driven by the official openai SDK (responses.create and responses.stream) against
// the listening gateway: the mock provider, and fake OpenAI-compatible, Anthropic and Gemini upstreams.

const weatherTool: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather for a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
}

const citySchema = {
  type: 'object',
  properties: { city: { type: 'string' }, population: { type: 'integer' } },
  required: ['city', 'population'],
  additionalProperties: false,
}

/** An OpenAI chat completion chunk, as the fake OpenAI-compatible upstream streams it. */
function chunk(delta: Record<string, unknown>, finish: string | null = null, usage: unknown = null): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1700000000,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    usage,
  })
}

const usageChunk = (prompt: number, completion: number, cached = 0): string =>
  JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1700000000,
    model: 'gpt-4o-mini',
    choices: [],
    usage: {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      prompt_tokens_details: { cached_tokens: cached },
      completion_tokens_details: { reasoning_tokens: 0 },
    },
  })

function completion(message: Record<string, unknown>, finish = 'stop'): Record<string, unknown> {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1700000000,
    model: 'gpt-4o-mini',
    choices: [
      { index: 0, message: { role: 'assistant', ...message }, logprobs: null, finish_reason: finish },
    ],
    usage: {
      prompt_tokens: 30,
      completion_tokens: 12,
      total_tokens: 42,
      prompt_tokens_details: { cached_tokens: 8 },
      completion_tokens_details: { reasoning_tokens: 4 },
    },
  }
}

const OPENAI_CHAT = 'POST /v1/chat/completions'
const openaiEnv = (origin: string) => ({
  OPENAI_API_KEY: 'sk-fake-upstream-key',
  OPENAI_BASE_URL: `${origin}/v1`,
})

describe('responses with the mock provider', () => {
  let gw: TestGateway
  let client: OpenAI

  beforeAll(async () => {
    gw = await startGateway({ listen: true })
    client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it('creates a response, recorded under /v1/responses with its generation id', async () => {
    const { data: res, response } = await client.responses
      .create({ model: 'mock/chat', input: 'Tell me about foxes', instructions: 'Be short' })
      .withResponse()
    const generationId = response.headers.get('x-generation-id')!
    expect(generationId).toMatch(/^gen-/)
    expect(res.id).toBe(`resp_${generationId.slice(4)}`)
    expect(res.object).toBe('response')
    expect(res.status).toBe('completed')
    expect(res.model).toBe('mock/chat')
    expect(res.instructions).toBe('Be short')
    expect(res.output).toHaveLength(1)
    expect(res.output[0]).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' })
    expect(res.output_text).toContain('foxes')
    expect(res.usage!.input_tokens).toBeGreaterThan(0)
    expect(res.usage!.total_tokens).toBe(res.usage!.input_tokens + res.usage!.output_tokens)
    const record = await readGeneration(gw, generationId)
    expect(record).toMatchObject({ api: '/v1/responses', generationId, model: 'mock/chat' })
  })

  it('streams the same text as the blocking answer, events in sequence, ending completed', async () => {
    const blocking = await client.responses.create({ model: 'mock/chat', input: 'Tell me about owls' })
    const stream = client.responses.stream({ model: 'mock/chat', input: 'Tell me about owls' })
    const types: string[] = []
    const sequence: number[] = []
    let text = ''
    for await (const e of stream) {
      types.push(e.type)
      sequence.push(e.sequence_number)
      if (e.type === 'response.output_text.delta') text += e.delta
    }
    const final = await stream.finalResponse()
    expect(text).toBe(blocking.output_text)
    expect(final.output_text).toBe(blocking.output_text)
    expect(final.status).toBe('completed')
    expect(final.usage!.output_tokens).toBeGreaterThan(0)
    expect(sequence).toEqual(sequence.map((_, i) => i))
    expect(types.slice(0, 4)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ])
    expect(types.slice(-4)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ])
  })

  it('is incomplete at the output limit, blocking and streamed', async () => {
    const res = await client.responses.create({
      model: 'mock/chat',
      input: 'Tell me a story',
      max_output_tokens: 3,
    })
    expect(res.status).toBe('incomplete')
    expect(res.incomplete_details).toEqual({ reason: 'max_output_tokens' })
    expect(res.usage!.output_tokens).toBe(3)
    const stream = client.responses.stream({
      model: 'mock/chat',
      input: 'Tell me a story',
      max_output_tokens: 3,
    })
    const types: string[] = []
    for await (const e of stream) types.push(e.type)
    expect(types.at(-1)).toBe('response.incomplete')
    expect(types).not.toContain('response.completed')
  })

  it('refuses a built-in tool by name with a 400, and an unknown previous_response_id with a 404', async () => {
    const err = await client.responses
      .create({ model: 'mock/chat', input: 'hi', tools: [{ type: 'web_search_preview' }] })
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.BadRequestError)
    const e = err as InstanceType<typeof OpenAI.BadRequestError>
    expect(e.message).toContain('web_search_preview')
    expect(e.error).toMatchObject({ code: 'unsupported_parameter', param: 'tools[0].type' })
    const prev = await client.responses
      .create({ model: 'mock/chat', input: 'hi', previous_response_id: 'resp_123' })
      .catch((e: unknown) => e)
    expect(prev).toBeInstanceOf(OpenAI.NotFoundError)
    expect((prev as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
      code: 'response_not_found',
      param: 'previous_response_id',
    })
  })
})

describe('responses through a fake OpenAI-compatible upstream', () => {
  it('runs a function tool round trip: the call, then its output sent back', async () => {
    let turn = 0
    const { fake, client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: (_req, res) =>
          sendJson(
            res,
            200,
            turn++ === 0
              ? completion(
                  {
                    content: null,
                    tool_calls: [
                      {
                        id: 'call_abc',
                        type: 'function',
                        function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
                      },
                    ],
                  },
                  'tool_calls',
                )
              : completion({ content: 'It is sunny in Paris.' }),
          ),
      },
      openaiEnv,
    )
    const first = await client.responses.create({
      model: 'openai/gpt-4o-mini',
      input: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [weatherTool],
      tool_choice: 'auto',
      parallel_tool_calls: false,
    })
    const call = first.output.find((o) => o.type === 'function_call')!
    expect(call).toMatchObject({
      type: 'function_call',
      call_id: 'call_abc',
      name: 'get_weather',
      arguments: '{"city":"Paris"}',
    })
    expect(first.usage).toEqual({
      input_tokens: 30,
      input_tokens_details: { cached_tokens: 8 },
      output_tokens: 12,
      output_tokens_details: { reasoning_tokens: 4 },
      total_tokens: 42,
    })
    expect(sentBody(fake, 0)).toMatchObject({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'Weather for a city',
            parameters: weatherTool.parameters,
            strict: true,
          },
        },
      ],
      tool_choice: 'auto',
      parallel_tool_calls: false,
    })

    const second = await client.responses.create({
      model: 'openai/gpt-4o-mini',
      input: [
        { role: 'user', content: 'Weather in Paris?' },
        ...first.output.map((o) => o as OpenAI.Responses.ResponseInputItem),
        {
          type: 'function_call_output',
          call_id: call.type === 'function_call' ? call.call_id : '',
          output: '{"sky":"sunny"}',
        },
      ],
      tools: [weatherTool],
    })
    expect(second.output_text).toBe('It is sunny in Paris.')
    expect(sentBody(fake, 1).messages).toEqual([
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_abc',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'call_abc', content: '{"sky":"sunny"}' },
    ])
  })

  it('streams a function call: arguments deltas, done events, and the final response', async () => {
    const { client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: (_req, res) =>
          sendSse(res, [
            chunk({ role: 'assistant', content: null }),
            chunk({
              tool_calls: [
                {
                  index: 0,
                  id: 'call_xyz',
                  type: 'function',
                  function: { name: 'get_weather', arguments: '' },
                },
              ],
            }),
            chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
            chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }),
            chunk({}, 'tool_calls'),
            usageChunk(20, 9),
            '[DONE]',
          ]),
      },
      openaiEnv,
    )
    const stream = client.responses.stream({
      model: 'openai/gpt-4o-mini',
      input: 'Weather in Oslo?',
      tools: [weatherTool],
    })
    const deltas: string[] = []
    let done: OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent | undefined
    for await (const e of stream) {
      if (e.type === 'response.function_call_arguments.delta') deltas.push(e.delta)
      if (e.type === 'response.function_call_arguments.done') done = e
    }
    const final = await stream.finalResponse()
    expect(deltas).toEqual(['{"city":', '"Oslo"}'])
    expect(done!.arguments).toBe('{"city":"Oslo"}')
    expect(final.status).toBe('completed')
    expect(final.output).toEqual([
      expect.objectContaining({
        type: 'function_call',
        call_id: 'call_xyz',
        name: 'get_weather',
        arguments: '{"city":"Oslo"}',
        status: 'completed',
      }),
    ])
    expect(final.usage).toMatchObject({ input_tokens: 20, output_tokens: 9, total_tokens: 29 })
  })

  it('sends text.format json_schema upstream as response_format, and parses the answer', async () => {
    const { fake, client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: (_req, res) =>
          sendJson(res, 200, completion({ content: '{"city":"Lyon","population":522000}' })),
      },
      openaiEnv,
    )
    const res = await client.responses.parse({
      model: 'openai/gpt-4o-mini',
      input: 'A French city',
      text: { format: { type: 'json_schema', name: 'city', schema: citySchema, strict: true } },
      max_output_tokens: 200,
      temperature: 0.2,
      top_p: 0.9,
      metadata: { team: 'search' },
      user: 'user-7',
      reasoning: { effort: 'low' },
    })
    expect(res.output_parsed).toEqual({ city: 'Lyon', population: 522000 })
    expect(res.text?.format).toMatchObject({ type: 'json_schema', name: 'city' })
    expect(res.metadata).toEqual({ team: 'search' })
    expect(sentBody(fake)).toMatchObject({
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'city', schema: citySchema, strict: true },
      },
      max_completion_tokens: 200,
      temperature: 0.2,
      top_p: 0.9,
      user: 'user-7',
      reasoning_effort: 'low',
    })
    expect(sentBody(fake).metadata).toBeUndefined()
  })

  it('streams json_schema output the SDK parses at the end', async () => {
    const { client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: (_req, res) =>
          sendSse(res, [
            chunk({ role: 'assistant', content: '' }),
            chunk({ content: '{"city":"Nantes",' }),
            chunk({ content: '"population":320000}' }),
            chunk({}, 'stop'),
            usageChunk(15, 10, 5),
            '[DONE]',
          ]),
      },
      openaiEnv,
    )
    const stream = client.responses.stream({
      model: 'openai/gpt-4o-mini',
      input: 'A French city',
      text: { format: { type: 'json_schema', name: 'city', schema: citySchema, strict: true } },
    })
    const final = await stream.finalResponse()
    expect(final.output_parsed).toEqual({ city: 'Nantes', population: 320000 })
    expect(final.usage?.input_tokens_details.cached_tokens).toBe(5)
  })

  it('ends a stream that fails mid-answer with an error event the SDK throws', async () => {
    const { client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: async (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.write(`data: ${chunk({ role: 'assistant', content: 'Half an ans' })}\n\n`)
          await new Promise((r) => setTimeout(r, 20))
          res.write(`data: ${JSON.stringify({ error: { message: 'overloaded', type: 'server_error' } })}\n\n`)
          res.end()
        },
      },
      openaiEnv,
    )
    const stream = client.responses.stream({ model: 'openai/gpt-4o-mini', input: 'hello' })
    const types: string[] = []
    const err = await (async () => {
      for await (const e of stream) types.push(e.type)
    })().catch((e: unknown) => e)
    expect(err).toBeInstanceOf(OpenAI.APIError)
    expect(types).toContain('response.output_text.delta')
    expect(types).not.toContain('response.completed')
  })

  it('answers an upstream refusal before any output as an ordinary HTTP error, streamed or not', async () => {
    const { client } = await startGatewayBehindFake(
      {
        [OPENAI_CHAT]: (_req, res) =>
          sendJson(res, 400, {
            error: { message: 'Invalid schema for function', type: 'invalid_request_error' },
          }),
      },
      openaiEnv,
    )
    for (const call of [
      () => client.responses.create({ model: 'openai/gpt-4o-mini', input: 'hello' }),
      () => client.responses.stream({ model: 'openai/gpt-4o-mini', input: 'hello' }).finalResponse(),
    ]) {
      const err = await call().catch((e: unknown) => e)
      expect(err).toBeInstanceOf(OpenAI.BadRequestError)
      expect((err as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({
        code: 'upstream_invalid_request',
      })
    }
  })

  it('sends image and file input parts as chat content parts', async () => {
    const { fake, client } = await startGatewayBehindFake(
      { [OPENAI_CHAT]: (_req, res) => sendJson(res, 200, completion({ content: 'A cat.' })) },
      openaiEnv,
    )
    await client.responses.create({
      model: 'openai/gpt-4o-mini',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'What is this?' },
            { type: 'input_image', image_url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' },
            { type: 'input_file', filename: 'a.pdf', file_data: 'data:application/pdf;base64,JVBERi0=' },
          ],
        },
      ],
    })
    expect(sentBody(fake).messages[0].content).toEqual([
      { type: 'text', text: 'What is this?' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
      { type: 'file', file: { filename: 'a.pdf', file_data: 'data:application/pdf;base64,JVBERi0=' } },
    ])
  })
})

describe('responses through a fake Anthropic upstream', () => {
  const anthropicEnv = (origin: string) => ({
    ANTHROPIC_API_KEY: 'sk-ant-fake-key-0000',
    ANTHROPIC_BASE_URL: origin,
  })

  it('streams thinking as a reasoning item whose signature goes back upstream on the next turn', async () => {
    let turn = 0
    const handler: FakeHandler = (req, res) =>
      turn++ === 0
        ? sseFile('anthropic/thinking.sse')(req, res)
        : writeSseText(
            res,
            toAnthropicSse([
              {
                type: 'message_start',
                message: {
                  id: 'msg_2',
                  type: 'message',
                  role: 'assistant',
                  content: [],
                  model: 'claude-sonnet-4-5',
                  stop_reason: null,
                  usage: { input_tokens: 60, output_tokens: 1 },
                },
              },
              { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
              { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Yes: 21.' } },
              { type: 'content_block_stop', index: 0 },
              { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 5 } },
              { type: 'message_stop' },
            ]),
          )
    const { fake, client } = await startGatewayBehindFake({ 'POST /v1/messages': handler }, anthropicEnv)
    const stream = client.responses.stream({
      model: 'anthropic/claude-sonnet-4-5',
      input: 'GCD of 1071 and 462?',
      reasoning: { effort: 'medium' },
    })
    let summary = ''
    for await (const e of stream) if (e.type === 'response.reasoning_summary_text.delta') summary += e.delta
    const first = await stream.finalResponse()
    expect(summary).toContain('Euclidean algorithm')
    expect(first.output.map((o) => o.type)).toEqual(['reasoning', 'message'])
    expect(first.output_text).toBe('The greatest common divisor of 1071 and 462 is **21**.')
    expect(first.output[0]).toMatchObject({
      type: 'reasoning',
      summary: [{ type: 'summary_text', text: summary }],
    })
    expect(sentBody(fake, 0).thinking).toMatchObject({ type: 'enabled' })

    await client.responses
      .stream({
        model: 'anthropic/claude-sonnet-4-5',
        input: [
          { role: 'user', content: 'GCD of 1071 and 462?' },
          ...first.output.map((o) => o as OpenAI.Responses.ResponseInputItem),
          { role: 'user', content: 'Sure?' },
        ],
        reasoning: { effort: 'medium' },
      })
      .finalResponse()
    const assistantTurn = sentBody(fake, 1).messages[1]
    expect(assistantTurn.role).toBe('assistant')
    expect(assistantTurn.content[0]).toEqual({
      type: 'thinking',
      thinking: summary,
      signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
    })
  })
})

describe('responses through a fake Gemini upstream', () => {
  const geminiEnv = (origin: string) => ({
    GEMINI_API_KEY: 'AIzaSy-FAKE-test-key-000000000000000',
    GEMINI_BASE_URL: origin,
  })

  it('creates a response from generateContent', async () => {
    const { fake, client } = await startGatewayBehindFake(
      { 'POST /v1beta/models/gemini-2.5-flash:generateContent': jsonFile('gemini/completion.json') },
      geminiEnv,
    )
    const res = await client.responses.create({
      model: 'google/gemini-2.5-flash',
      input: 'What is 1+1?',
      instructions: 'Answer briefly',
    })
    expect(res.output_text).toBe('1+1 equals 2.')
    expect(res.usage).toMatchObject({ input_tokens: 15, output_tokens: 6, total_tokens: 21 })
    expect(sentBody(fake).systemInstruction).toEqual({ parts: [{ text: 'Answer briefly' }] })
  })

  it('streams parallel function calls, and the tool outputs go back as function responses', async () => {
    let turn = 0
    const { fake, client } = await startGatewayBehindFake(
      {
        'POST /v1beta/models/gemini-3-pro-preview:streamGenerateContent': (req, res) =>
          turn++ === 0
            ? sseFile('gemini/parallel-function-calls.sse')(req, res)
            : sseFile('gemini/text.sse')(req, res),
      },
      geminiEnv,
    )
    const stream = client.responses.stream({
      model: 'google/gemini-3-pro-preview',
      input: 'Weather in Paris and Tokyo?',
      tools: [weatherTool],
    })
    const first = await stream.finalResponse()
    const calls = first.output.filter((o) => o.type === 'function_call')
    expect(calls.map((c) => c.type === 'function_call' && JSON.parse(c.arguments))).toEqual([
      { location: 'Paris, France' },
      { location: 'Tokyo, Japan' },
    ])
    const outputs = calls.map((c) => ({
      type: 'function_call_output' as const,
      call_id: c.type === 'function_call' ? c.call_id : '',
      output: '{"temp":20}',
    }))
    const second = client.responses.stream({
      model: 'google/gemini-3-pro-preview',
      input: [
        { role: 'user', content: 'Weather in Paris and Tokyo?' },
        ...first.output.map((o) => o as OpenAI.Responses.ResponseInputItem),
        ...outputs,
      ],
      tools: [weatherTool],
    })
    const final = await second.finalResponse()
    expect(final.status).toBe('completed')
    const contents = sentBody(fake, 1).contents
    expect(contents[1].role).toBe('model')
    // The thought signature Gemini gave with the first call is back on it.
    expect(contents[1].parts[0]).toMatchObject({
      functionCall: { name: 'get_weather', args: { location: 'Paris, France' } },
      thoughtSignature: 'CiQBVKhc7oDnVvJ4Zq5yVqwnHGdOpd0Xq4xX',
    })
    expect(
      contents[2].parts.map((p: { functionResponse: { name: string } }) => p.functionResponse.name),
    ).toEqual(['get_weather', 'get_weather'])
  })
})

import { createOpenAI } from '@ai-sdk/openai'
import { generateObject, generateText, stepCountIs, streamText, tool } from 'ai'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { sendJson, sendSse, sentBody } from '../support/fake-upstream.ts'
import { readGeneration, startGateway, startGatewayBehindFake, type TestGateway } from '../support/gateway.ts'

// The Vercel AI SDK's `@ai-sdk/openai` default model, which speaks the Responses API, against the
// listening gateway's mock provider: what a user of the AI SDK tries first, with no provider key.

const Recipe = z.object({
  name: z.string(),
  servings: z.number().int().min(1),
  ingredients: z.array(z.object({ name: z.string(), amount: z.string() })),
  vegetarian: z.boolean(),
})

describe('Vercel AI SDK (@ai-sdk/openai, Responses) against the mock', () => {
  let gw: TestGateway
  let openai: ReturnType<typeof createOpenAI>
  const seen: { url: string; body: Record<string, unknown> }[] = []

  beforeAll(async () => {
    gw = await startGateway({ listen: true })
    openai = createOpenAI({
      baseURL: `${gw.origin}/v1`,
      apiKey: 'sk-dev',
      // Record what the SDK sends, then send it unchanged.
      fetch: async (input, init) => {
        const url = typeof input === 'string' ? input : input instanceof URL ? input.href : input.url
        if (typeof init?.body === 'string') seen.push({ url, body: JSON.parse(init.body) })
        return fetch(input, init)
      },
    })
  })
  afterAll(async () => {
    await gw?.close()
  })

  it('the default model speaks the Responses API: generateText answers and is recorded', async () => {
    seen.length = 0
    const result = await generateText({
      model: openai('mock/chat'),
      system: 'Be short',
      prompt: 'Tell me about foxes',
      maxRetries: 0,
    })
    expect(seen.map((s) => s.url)).toEqual([`${gw.origin}/v1/responses`])
    expect(result.text).toContain('foxes')
    expect(result.finishReason).toBe('stop')
    expect(result.usage.inputTokens).toBeGreaterThan(0)
    expect(result.usage.totalTokens).toBe(result.usage.inputTokens! + result.usage.outputTokens!)
    const responseId = result.response.id
    expect(responseId).toMatch(/^resp_/)
    const record = await readGeneration(gw, `gen-${responseId.slice(5)}`)
    expect(record).toMatchObject({ api: '/v1/responses', model: 'mock/chat' })
  })

  it('streamText streams the text deltas and finishes with usage', async () => {
    const result = streamText({ model: openai('mock/chat'), prompt: 'Tell me about owls', maxRetries: 0 })
    const deltas: string[] = []
    for await (const delta of result.textStream) deltas.push(delta)
    expect(deltas.length).toBeGreaterThan(1)
    expect(deltas.join('')).toBe(await result.text)
    expect(await result.text).toContain('owls')
    expect(await result.finishReason).toBe('stop')
    const usage = await result.usage
    expect(usage.outputTokens).toBeGreaterThan(0)
  })

  it('generateObject gets an object valid against the zod schema (json_schema, strict)', async () => {
    seen.length = 0
    const { object } = await generateObject({
      model: openai('mock/chat'),
      schema: Recipe,
      prompt: 'A recipe for pancakes',
      maxRetries: 0,
    })
    expect(Recipe.parse(object)).toEqual(object)
    const format = (seen[0]!.body.text as { format: Record<string, unknown> }).format
    expect(format).toMatchObject({ type: 'json_schema', strict: true })
  })

  it('a tool loop: the model calls the tool, the SDK sends its result, the model answers', async () => {
    seen.length = 0
    const calls: unknown[] = []
    const result = await generateText({
      model: openai('mock/chat'),
      tools: {
        get_weather: tool({
          description: 'Weather for a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async (input) => {
            calls.push(input)
            return { temperature: 21, sky: 'clear' }
          },
        }),
      },
      stopWhen: stepCountIs(4),
      prompt: 'What is the weather in Paris? Use get_weather',
      maxRetries: 0,
    })
    expect(calls).toHaveLength(1)
    expect(result.steps).toHaveLength(2)
    expect(result.steps[0]!.finishReason).toBe('tool-calls')
    expect(result.finishReason).toBe('stop')
    expect(result.text.length).toBeGreaterThan(0)
    expect(seen).toHaveLength(2)
    // The second request carries the call and its output back (as items, or by reference to the
    // stored first response): either way the gateway must resolve it.
    const second = JSON.stringify(seen[1]!.body)
    expect(second).toContain('function_call_output')
  })

  it('a streamed tool loop gives the same shape', async () => {
    let executed = 0
    const result = streamText({
      model: openai('mock/chat'),
      tools: {
        get_weather: tool({
          description: 'Weather for a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async () => {
            executed++
            return { temperature: 21 }
          },
        }),
      },
      stopWhen: stepCountIs(4),
      prompt: 'What is the weather in Oslo? Use get_weather',
      maxRetries: 0,
    })
    const text = await result.text
    const steps = await result.steps
    expect(executed).toBe(1)
    expect(steps).toHaveLength(2)
    expect(steps[0]!.toolCalls[0]).toMatchObject({ toolName: 'get_weather' })
    expect(text.length).toBeGreaterThan(0)
  })

  it('store: false keeps nothing and the tool loop still works (items sent in full)', async () => {
    seen.length = 0
    let executed = 0
    const result = await generateText({
      model: openai('mock/chat'),
      providerOptions: { openai: { store: false } },
      tools: {
        get_weather: tool({
          inputSchema: z.object({ city: z.string() }),
          execute: async () => {
            executed++
            return 'sunny'
          },
        }),
      },
      stopWhen: stepCountIs(4),
      prompt: 'Weather in Rome? Use get_weather',
      maxRetries: 0,
    })
    expect(executed).toBe(1)
    expect(result.steps).toHaveLength(2)
    expect(seen.every((s) => s.body.store === false)).toBe(true)
  })

  it('a second turn sends the first answer back by item_reference: the gateway resolves it', async () => {
    const first = await generateText({
      model: openai('mock/chat'),
      prompt: 'Tell me about badgers',
      maxRetries: 0,
    })
    seen.length = 0
    const second = await generateText({
      model: openai('mock/chat'),
      messages: [
        { role: 'user', content: 'Tell me about badgers' },
        ...first.response.messages,
        { role: 'user', content: 'And about otters' },
      ],
      maxRetries: 0,
    })
    const input = seen[0]!.body.input as { type?: string; id?: string }[]
    const reference = input.find((i) => i.type === 'item_reference')
    expect(reference?.id).toMatch(/^msg_/)
    expect(second.text).toContain('otters')
    // The referenced answer reached the model as the assistant turn: it is counted in the prompt.
    expect(second.usage.inputTokens).toBeGreaterThan(first.usage.inputTokens! + first.usage.outputTokens!)
  })
})

describe('Vercel AI SDK: reasoning from an OpenAI-compatible upstream, sent back by reference', () => {
  it('the reasoning item is stored and an item_reference to it resolves on the next turn', async () => {
    let call = 0
    const { fake, gw } = await startGatewayBehindFake(
      {
        'POST /v1/chat/completions': (_req, res) => {
          call++
          sendJson(res, 200, {
            id: `chatcmpl-${call}`,
            object: 'chat.completion',
            created: 1700000000,
            model: 'gpt-4o-mini',
            choices: [
              {
                index: 0,
                message: {
                  role: 'assistant',
                  content: `answer ${call}`,
                  reasoning_content: `thought ${call}`,
                },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
          })
        },
      },
      (origin) => ({ OPENAI_API_KEY: 'sk-fake-upstream-key', OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const bodies: { input: { type?: string; id?: string }[] }[] = []
    const openai = createOpenAI({
      baseURL: `${gw.origin}/v1`,
      apiKey: 'sk-dev',
      fetch: async (input, init) => {
        bodies.push(JSON.parse(String(init?.body)))
        return fetch(input, init)
      },
    })
    const first = await generateText({ model: openai('openai/gpt-4o-mini'), prompt: 'Think', maxRetries: 0 })
    expect(first.reasoningText).toBe('thought 1')
    expect(first.text).toBe('answer 1')
    const second = await generateText({
      model: openai('openai/gpt-4o-mini'),
      messages: [
        { role: 'user', content: 'Think' },
        ...first.response.messages,
        { role: 'user', content: 'More' },
      ],
      maxRetries: 0,
    })
    expect(second.text).toBe('answer 2')
    const references = bodies[1]!.input.filter((i) => i.type === 'item_reference').map((i) => i.id)
    expect(references).toEqual([expect.stringMatching(/^rs_/), expect.stringMatching(/^msg_/)])
    const upstream = sentBody(fake, 1) as { messages: Record<string, unknown>[] }
    expect(upstream.messages).toMatchObject([
      { role: 'user', content: [{ type: 'text', text: 'Think' }] },
      { role: 'assistant', content: 'answer 1' },
      { role: 'user', content: [{ type: 'text', text: 'More' }] },
    ])
  })

  it('streamText: streamed reasoning comes as reasoning deltas, then the text', async () => {
    const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
      JSON.stringify({
        id: 'chatcmpl-s',
        object: 'chat.completion.chunk',
        created: 1700000000,
        model: 'gpt-4o-mini',
        choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      })
    const { gw } = await startGatewayBehindFake(
      {
        'POST /v1/chat/completions': (_req, res) =>
          sendSse(res, [
            chunk({ role: 'assistant', content: '' }),
            chunk({ reasoning_content: 'Let me ' }),
            chunk({ reasoning_content: 'think.' }),
            chunk({ content: 'Four' }),
            chunk({ content: '.' }, 'stop'),
            JSON.stringify({
              id: 'chatcmpl-s',
              object: 'chat.completion.chunk',
              created: 1700000000,
              model: 'gpt-4o-mini',
              choices: [],
              usage: { prompt_tokens: 8, completion_tokens: 6, total_tokens: 14 },
            }),
            '[DONE]',
          ]),
      },
      (origin) => ({ OPENAI_API_KEY: 'sk-fake-upstream-key', OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const openai = createOpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev' })
    const result = streamText({ model: openai('openai/gpt-4o-mini'), prompt: '2+2?', maxRetries: 0 })
    const kinds: string[] = []
    for await (const part of result.fullStream) kinds.push(part.type)
    expect(await result.reasoningText).toBe('Let me think.')
    expect(await result.text).toBe('Four.')
    expect(kinds.indexOf('reasoning-delta')).toBeLessThan(kinds.indexOf('text-delta'))
    expect((await result.usage).outputTokens).toBe(6)
  })
})

import OpenAI from 'openai'
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// The OpenAI SDK's structured-output and tool helpers against the gateway's mock provider, with no
// key: what a user tries first. The SDK parses the answer with the zod schema, so a reply that is not
// an instance of the schema fails here.

const CalendarEvent = z.object({
  name: z.string().min(3),
  organiser: z.email(),
  date: z.iso.date(),
  participants: z.array(z.string()).min(2),
  priority: z.enum(['low', 'normal', 'high']),
  location: z.object({ room: z.string(), floor: z.number().int().min(1) }).nullable(),
  tags: z.array(z.object({ label: z.string(), weight: z.number().min(0.5).max(2) })),
})

describe('OpenAI SDK structured output and tools against the mock', () => {
  let gw: TestGateway
  let client: OpenAI
  beforeAll(async () => {
    gw = await startGateway({ listen: true })
    client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  })
  afterAll(() => gw.close())

  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'Extract the event information.' },
    { role: 'user', content: 'Alice and Bob are going to a science fair on Friday.' },
  ]

  it('chat.completions.parse with a zod json_schema gives a parsed object', async () => {
    const completion = await client.chat.completions.parse({
      model: 'mock/chat',
      messages,
      response_format: zodResponseFormat(CalendarEvent, 'event'),
    })
    const message = completion.choices[0]!.message
    expect(message.parsed).toEqual({
      name: 'mock',
      organiser: 'mock@example.com',
      date: '2025-01-01',
      participants: ['mock', 'mock'],
      priority: 'low',
      location: { room: 'mock', floor: 1 },
      tags: [],
    })
    expect(CalendarEvent.parse(JSON.parse(message.content!))).toEqual(message.parsed)
  })

  it('a streamed structured answer parses to the same object', async () => {
    const stream = client.chat.completions.stream({
      model: 'mock/chat',
      messages,
      response_format: zodResponseFormat(CalendarEvent, 'event'),
    })
    let deltas = 0
    stream.on('content.delta', () => deltas++)
    const final = await stream.finalChatCompletion()
    expect(deltas).toBeGreaterThan(2)
    expect(CalendarEvent.parse(final.choices[0]!.message.parsed)).toMatchObject({ priority: 'low' })
  })

  it('json_object answers valid JSON', async () => {
    const completion = await client.chat.completions.create({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'Answer in JSON.' }],
      response_format: { type: 'json_object' },
    })
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ reply: expect.any(String) })
  })

  it('runTools: a tool the user names is called with valid arguments, then the loop ends with text', async () => {
    const calls: unknown[] = []
    const runner = client.chat.completions.runTools({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'Check the forecast with get_weather, please.' }],
      tools: [
        zodFunction({
          name: 'get_weather',
          parameters: z.object({
            city: z.string(),
            days: z.number().int().min(1).max(7),
            units: z.enum(['celsius', 'fahrenheit']),
          }),
          function: (args) => {
            calls.push(args)
            return { forecast: 'sunny' }
          },
        }),
      ],
    })
    const content = await runner.finalContent()
    expect(calls).toEqual([{ city: 'mock', days: 1, units: 'celsius' }])
    expect(content).toContain('Mock reply to')
    // user, assistant tool call, tool result, assistant text
    expect(runner.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool', 'assistant'])
  })

  it('tool_choice naming a function forces that call, streamed too', async () => {
    const stream = client.chat.completions.stream({
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'hello' }],
      tools: [
        zodFunction({ name: 'lookup', parameters: z.object({ ids: z.array(z.number().int()).min(1) }) }),
      ],
      tool_choice: { type: 'function', function: { name: 'lookup' } },
    })
    const final = await stream.finalChatCompletion()
    const call = final.choices[0]!.message.tool_calls![0]!
    expect(call.type === 'function' && call.function.parsed_arguments).toEqual({ ids: [1] })
    expect(final.choices[0]!.finish_reason).toBe('tool_calls')
  })
})

import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../../src/errors.ts'
import { finishNow } from '../../../../src/turns.ts'
import {
  COUNT_WINDOW,
  countTokens,
  countTokensSteps,
  mockEmbeddingsSteps,
  mockReply,
  mockChatChunks,
  mockChatCompletion,
  mockEmbeddings,
} from '../../../../src/providers/mock/reply.ts'
import { sampleFromSchema } from '../../../../src/providers/mock/schema-instance.ts'
import type { ChatRequest, FunctionTool } from '../../../../src/providers/types.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const model = 'mock-chat'
const now = 1_700_000_000_123

const hello: ChatRequest = {
  model: 'mock/mock-chat',
  messages: [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hello there' },
  ],
}

const weather: FunctionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string' },
        days: { type: 'integer' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        alerts: { type: 'boolean' },
        where: {
          type: 'object',
          properties: { lat: { type: 'number' }, tags: { type: 'array' }, note: { type: 'string' } },
          required: ['lat', 'tags'],
        },
        optional: { type: 'string' },
      },
      required: ['city', 'days', 'unit', 'alerts', 'where'],
    },
  },
}
const search: FunctionTool = {
  type: 'function',
  function: {
    name: 'search',
    parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
  },
}

function content(chunks: ChatChunk[]): string {
  return chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')
}

describe('countTokens', () => {
  it('counts words and each punctuation character', () => {
    expect(countTokens('Hi, there!')).toBe(4)
    expect(countTokens('  ')).toBe(0)
    expect(countTokens('snake_case 42 café')).toBe(3)
  })
})

describe('mockChatCompletion', () => {
  it('answers deterministically from the last user message', () => {
    const a = mockChatCompletion(hello, model, now)
    const b = mockChatCompletion(structuredClone(hello), model, now)
    expect(JSON.stringify(a)).toBe(JSON.stringify(b))
    expect(a).toMatchObject({
      object: 'chat.completion',
      created: 1_700_000_000,
      model,
      system_fingerprint: 'junction-mock',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
    })
    expect(a.id).toMatch(/^mockcmpl-[0-9a-f]+$/)
    const text = a.choices[0]?.message.content ?? ''
    expect(text.startsWith('Mock reply to "Hello there": ')).toBe(true)
    expect(countTokens(text)).toBeGreaterThanOrEqual(20)
    expect(countTokens(text)).toBeLessThanOrEqual(30)
  })

  it('changes only created with the clock, and the reply with the input', () => {
    const a = mockChatCompletion(hello, model, now)
    const later = mockChatCompletion(hello, model, now + 5000)
    expect({ ...later, created: a.created }).toEqual(a)
    const other = mockChatCompletion(
      { ...hello, messages: [{ role: 'user', content: 'Goodbye' }] },
      model,
      now,
    )
    expect(other.choices[0]?.message.content).not.toBe(a.choices[0]?.message.content)
    expect(other.id).not.toBe(a.id)
  })

  it('quotes at most 60 characters of the user message', () => {
    const long = 'x'.repeat(100)
    const res = mockChatCompletion({ ...hello, messages: [{ role: 'user', content: long }] }, model, now)
    expect(res.choices[0]?.message.content).toContain(`"${'x'.repeat(60)}"`)
  })

  it('counts prompt tokens over all messages, including text parts', () => {
    const req: ChatRequest = {
      ...hello,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hello there' }] },
      ],
    }
    const { usage } = mockChatCompletion(req, model, now)
    const text = mockChatCompletion(req, model, now).choices[0]?.message.content ?? ''
    expect(usage).toEqual({
      prompt_tokens: 5,
      completion_tokens: countTokens(text),
      total_tokens: 5 + countTokens(text),
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    })
  })

  it('truncates at max_completion_tokens with finish_reason length', () => {
    const res = mockChatCompletion({ ...hello, max_completion_tokens: 5 }, model, now)
    expect(res.choices[0]?.message.content).toBe('Mock reply to "Hello')
    expect(res.choices[0]?.finish_reason).toBe('length')
    expect(res.usage?.completion_tokens).toBe(5)
  })

  it('honours legacy max_tokens, and a limit above the reply length changes nothing', () => {
    const legacy = mockChatCompletion({ ...hello, max_tokens: 3 }, model, now)
    expect(legacy.choices[0]?.message.content).toBe('Mock reply to')
    expect(legacy.choices[0]?.finish_reason).toBe('length')
    const roomy = mockChatCompletion({ ...hello, max_completion_tokens: 1000 }, model, now)
    expect(roomy.choices[0]).toEqual(mockChatCompletion(hello, model, now).choices[0])
  })

  it('cuts before the earliest stop string with finish_reason stop', () => {
    const res = mockChatCompletion({ ...hello, stop: ['lazy', 'fox'] }, model, now)
    expect(res.choices[0]?.message.content).toBe('Mock reply to "Hello there": The quick brown ')
    expect(res.choices[0]?.finish_reason).toBe('stop')
    expect(res.usage?.completion_tokens).toBe(11)
    const single = mockChatCompletion({ ...hello, stop: 'brown' }, model, now)
    expect(single.choices[0]?.message.content).toBe('Mock reply to "Hello there": The quick ')
  })

  it('reports length when the token limit bites before the stop string', () => {
    const res = mockChatCompletion({ ...hello, stop: 'lazy', max_completion_tokens: 4 }, model, now)
    expect(res.choices[0]?.message.content).toBe('Mock reply to "')
    expect(res.choices[0]?.finish_reason).toBe('length')
  })

  it('calls the first tool with schema-derived arguments when tool_choice is required', () => {
    const res = mockChatCompletion(
      { ...hello, tools: [weather, search], tool_choice: 'required' },
      model,
      now,
    )
    const choice = res.choices[0]
    expect(choice?.finish_reason).toBe('tool_calls')
    expect(choice?.message.content).toBeNull()
    const call = choice?.message.tool_calls?.[0]
    expect(choice?.message.tool_calls).toHaveLength(1)
    expect(call?.id).toMatch(/^call_[0-9a-f]+$/)
    expect(call?.type).toBe('function')
    expect(call?.function.name).toBe('get_weather')
    expect(JSON.parse(call?.function.arguments ?? '')).toEqual({
      city: 'mock',
      days: 1,
      unit: 'celsius',
      alerts: true,
      where: { lat: 1, tags: [] },
    })
    expect(res.usage?.completion_tokens).toBeGreaterThan(0)
  })

  it('calls the named function', () => {
    const res = mockChatCompletion(
      { ...hello, tools: [weather, search], tool_choice: { type: 'function', function: { name: 'search' } } },
      model,
      now,
    )
    const call = res.choices[0]?.message.tool_calls?.[0]
    expect(call?.function.name).toBe('search')
    expect(JSON.parse(call?.function.arguments ?? '')).toEqual({ q: 'mock' })
  })

  it('calls an allowed tool when allowed_tools mode is required', () => {
    const res = mockChatCompletion(
      {
        ...hello,
        tools: [weather, search],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'search' } }] },
        },
      },
      model,
      now,
    )
    expect(res.choices[0]?.message.tool_calls?.[0]?.function.name).toBe('search')
  })

  it('answers with text when tool_choice is auto, absent or allowed_tools auto', () => {
    const choices: ChatRequest['tool_choice'][] = [
      'auto',
      undefined,
      'none',
      { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [] } },
    ]
    for (const tool_choice of choices) {
      const res = mockChatCompletion({ ...hello, tools: [weather], tool_choice }, model, now)
      expect(res.choices[0]?.finish_reason).toBe('stop')
      expect(res.choices[0]?.message.tool_calls).toBeUndefined()
      expect(res.choices[0]?.message.content).toContain('Mock reply to')
    }
  })

  it('rejects a named function that is not among the tools', () => {
    const req: ChatRequest = {
      ...hello,
      tools: [weather],
      tool_choice: { type: 'function', function: { name: 'nope' } },
    }
    expect(() => mockChatCompletion(req, model, now)).toThrow(GatewayError)
    try {
      mockChatCompletion(req, model, now)
    } catch (err) {
      expect(err).toMatchObject({ status: 400, code: 'invalid_value', param: 'tool_choice' })
    }
  })
})

describe('sampleFromSchema', () => {
  it('fills required properties only, following const, nullable types and anyOf', () => {
    expect(
      sampleFromSchema({
        type: 'object',
        properties: {
          a: { const: 'x' },
          b: { type: ['null', 'integer'] },
          c: { anyOf: [{ type: 'boolean' }, { type: 'string' }] },
          d: { properties: { e: { type: 'string' } }, required: ['e'] },
          f: { type: 'string' },
        },
        required: ['a', 'b', 'c', 'd'],
      }),
    ).toEqual({ a: 'x', b: 1, c: true, d: { e: 'mock' } })
  })
})

describe('mockChatChunks', () => {
  it('streams the blocking content in several chunks, then a finish chunk and a usage chunk', () => {
    const blocking = mockChatCompletion(hello, model, now)
    const chunks = mockChatChunks(hello, model, now)
    const first = chunks[0]
    expect(first?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' })
    const contentChunks = chunks.filter((c) => (c.choices[0]?.delta.content ?? '') !== '')
    expect(contentChunks.length).toBeGreaterThanOrEqual(3)
    expect(content(chunks)).toBe(blocking.choices[0]?.message.content)

    const finish = chunks.at(-2)
    expect(finish?.choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }])
    const usage = chunks.at(-1)
    expect(usage?.choices).toEqual([])
    expect(usage?.usage).toEqual(blocking.usage)
    for (const c of chunks) {
      expect(c).toMatchObject({
        id: blocking.id,
        object: 'chat.completion.chunk',
        created: blocking.created,
        model,
      })
    }
    expect(chunks.slice(0, -2).every((c) => c.choices[0]?.finish_reason === null)).toBe(true)
  })

  it('streams truncated and stopped replies with their finish reason', () => {
    for (const req of [
      { ...hello, max_completion_tokens: 5 },
      { ...hello, stop: 'fox' },
    ]) {
      const blocking = mockChatCompletion(req, model, now)
      const chunks = mockChatChunks(req, model, now)
      expect(content(chunks)).toBe(blocking.choices[0]?.message.content)
      expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe(blocking.choices[0]?.finish_reason)
    }
  })

  it('streams a tool call OpenAI-style, arguments in pieces', () => {
    const req: ChatRequest = { ...hello, tools: [weather], tool_choice: 'required' }
    const blocking = mockChatCompletion(req, model, now)
    const expected = blocking.choices[0]?.message.tool_calls?.[0]
    const chunks = mockChatChunks(req, model, now)
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: null })
    const deltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
    expect(deltas[0]).toEqual({
      index: 0,
      id: expected?.id,
      type: 'function',
      function: { name: 'get_weather', arguments: '' },
    })
    const pieces = deltas.slice(1).map((d) => d.function?.arguments ?? '')
    expect(pieces.length).toBeGreaterThanOrEqual(2)
    expect(deltas.slice(1).every((d) => d.index === 0 && d.id === undefined)).toBe(true)
    expect(pieces.join('')).toBe(expected?.function.arguments)
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('tool_calls')
    expect(chunks.at(-1)?.usage).toEqual(blocking.usage)
  })
})

describe('mockEmbeddings', () => {
  const norm = (v: number[]): number => Math.sqrt(v.reduce((s, x) => s + x * x, 0))
  const floats = (e: number[] | string): number[] => {
    if (typeof e === 'string') throw new Error('expected floats')
    return e
  }

  it('returns one deterministic unit vector per input, 256 dimensions by default', () => {
    const res = mockEmbeddings({ model: 'm', input: ['alpha', 'beta'] }, 'mock-embed')
    expect(res).toMatchObject({ object: 'list', model: 'mock-embed' })
    expect(res.data.map((d) => [d.object, d.index])).toEqual([
      ['embedding', 0],
      ['embedding', 1],
    ])
    const [a, b] = res.data.map((d) => floats(d.embedding))
    expect(a).toHaveLength(256)
    expect(Math.abs(norm(a ?? []) - 1)).toBeLessThan(1e-6)
    expect(Math.abs(norm(b ?? []) - 1)).toBeLessThan(1e-6)
    expect(a).not.toEqual(b)
    expect(mockEmbeddings({ model: 'm', input: 'alpha' }, 'mock-embed').data[0]?.embedding).toEqual(a)
  })

  it('honours dimensions', () => {
    for (const dimensions of [1, 3, 4096]) {
      const v = floats(mockEmbeddings({ model: 'm', input: 'x', dimensions }, 'e').data[0]?.embedding ?? [])
      expect(v).toHaveLength(dimensions)
      expect(Math.abs(norm(v) - 1)).toBeLessThan(1e-6)
    }
  })

  it('answers up to 1,048,576 numbers (inputs × dimensions) and refuses more', () => {
    const full = mockEmbeddings({ model: 'm', input: Array(256).fill('x'), dimensions: 4096 }, 'e')
    expect(full.data).toHaveLength(256)
    expect(full.data[255]?.embedding).toHaveLength(4096)
    expect(() => mockEmbeddings({ model: 'm', input: Array(257).fill('x'), dimensions: 4096 }, 'e')).toThrow(
      expect.objectContaining({ status: 400, code: 'invalid_value', param: 'dimensions' }),
    )
    // With the default 256 dimensions it is the number of inputs that is too large.
    expect(() => mockEmbeddings({ model: 'm', input: Array(4097).fill('x') }, 'e')).toThrow(
      expect.objectContaining({ status: 400, code: 'invalid_value', param: 'input' }),
    )
  })

  it('rejects dimensions outside 1..4096', () => {
    for (const dimensions of [0, 4097, 2.5]) {
      expect(() => mockEmbeddings({ model: 'm', input: 'x', dimensions }, 'e')).toThrow(
        expect.objectContaining({ status: 400, code: 'invalid_value', param: 'dimensions' }),
      )
    }
  })

  it('returns base64 of little-endian float32 values', () => {
    const plain = floats(
      mockEmbeddings({ model: 'm', input: 'hello', dimensions: 8 }, 'e').data[0]?.embedding ?? [],
    )
    const encoded = mockEmbeddings(
      { model: 'm', input: 'hello', dimensions: 8, encoding_format: 'base64' },
      'e',
    ).data[0]?.embedding
    expect(typeof encoded).toBe('string')
    const bytes = Buffer.from(encoded as string, 'base64')
    expect(bytes.length).toBe(32)
    const decoded = Array.from({ length: 8 }, (_, i) => bytes.readFloatLE(i * 4))
    expect(decoded).toEqual(plain)
  })

  it('accepts token arrays and counts usage', () => {
    const single = mockEmbeddings({ model: 'm', input: [1, 2, 3] }, 'e')
    expect(single.data).toHaveLength(1)
    expect(single.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 })
    const batch = mockEmbeddings({ model: 'm', input: [[1, 2], [3]] }, 'e')
    expect(batch.data).toHaveLength(2)
    expect(batch.data[0]?.embedding).toEqual(
      mockEmbeddings({ model: 'm', input: '1 2' }, 'e').data[0]?.embedding,
    )
    expect(mockEmbeddings({ model: 'm', input: ['Hi, there!', 'two words'] }, 'e').usage).toEqual({
      prompt_tokens: 6,
      total_tokens: 6,
    })
  })
})

describe('structured output (response_format)', () => {
  const event = {
    type: 'object',
    properties: {
      title: { type: 'string', minLength: 6 },
      when: { type: 'string', format: 'date' },
      attendees: { type: 'array', items: { type: 'string' }, minItems: 2 },
      priority: { type: 'string', enum: ['low', 'high'] },
      room: { anyOf: [{ type: 'null' }, { $ref: '#/$defs/room' }] },
    },
    required: ['title', 'when', 'attendees', 'priority', 'room'],
    additionalProperties: false,
    $defs: {
      room: {
        type: 'object',
        properties: { floor: { type: 'integer', minimum: 2 } },
        required: ['floor'],
        additionalProperties: false,
      },
    },
  }
  const expected = {
    title: 'mockxx',
    when: '2025-01-01',
    attendees: ['mock', 'mock'],
    priority: 'low',
    room: { floor: 2 },
  }

  it('json_schema: the content is an instance of the schema, blocking and streamed alike', () => {
    const req: ChatRequest = {
      ...hello,
      response_format: { type: 'json_schema', json_schema: { name: 'event', strict: true, schema: event } },
    }
    const blocking = mockChatCompletion(req, model, now)
    const text = blocking.choices[0]?.message.content ?? ''
    expect(JSON.parse(text)).toEqual(expected)
    expect(blocking.choices[0]?.finish_reason).toBe('stop')
    expect(blocking.usage?.completion_tokens).toBe(countTokens(text))
    const chunks = mockChatChunks(req, model, now)
    expect(chunks.filter((c) => (c.choices[0]?.delta.content ?? '') !== '').length).toBeGreaterThan(2)
    expect(content(chunks)).toBe(text)
  })

  it('json_schema without a schema is an empty object; json_object is an object holding the reply', () => {
    const bare = mockChatCompletion(
      { ...hello, response_format: { type: 'json_schema', json_schema: { name: 'any' } } },
      model,
      now,
    )
    expect(JSON.parse(bare.choices[0]?.message.content ?? '')).toEqual({})
    const req: ChatRequest = { ...hello, response_format: { type: 'json_object' } }
    const object = JSON.parse(mockChatCompletion(req, model, now).choices[0]?.message.content ?? '')
    expect(object).toEqual({ reply: expect.stringContaining('Mock reply to "Hello there"') })
    expect(JSON.parse(content(mockChatChunks(req, model, now)))).toEqual(object)
  })

  it('text (or no format) stays the plain reply', () => {
    const res = mockChatCompletion({ ...hello, response_format: { type: 'text' } }, model, now)
    expect(res.choices[0]?.message.content).toBe(
      mockChatCompletion(hello, model, now).choices[0]?.message.content,
    )
  })
})

describe('a tool the last user message names', () => {
  const asking = (text: string): ChatRequest => ({
    model: 'mock/mock-chat',
    messages: [{ role: 'user', content: text }],
    tools: [weather, search],
  })

  it('is called with arguments valid for its schema, blocking and streamed', () => {
    const req = asking('What is the weather in Paris? Use get_weather please.')
    const res = mockChatCompletion(req, model, now)
    expect(res.choices[0]?.finish_reason).toBe('tool_calls')
    const call = res.choices[0]?.message.tool_calls?.[0]
    expect(call?.function.name).toBe('get_weather')
    expect(JSON.parse(call?.function.arguments ?? '')).toEqual({
      city: 'mock',
      days: 1,
      unit: 'celsius',
      alerts: true,
      where: { lat: 1, tags: [] },
    })
    const chunks = mockChatChunks(req, model, now)
    const args = chunks.map((c) => c.choices[0]?.delta.tool_calls?.[0]?.function?.arguments ?? '').join('')
    expect(args).toBe(call?.function.arguments)
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe('tool_calls')
  })

  it('the first one named wins; a name inside another word is no mention', () => {
    expect(
      mockChatCompletion(asking('search first, then get_weather'), model, now).choices[0]?.message
        .tool_calls?.[0]?.function.name,
    ).toBe('search')
    const res = mockChatCompletion(asking('research the get_weathers'), model, now)
    expect(res.choices[0]?.message.tool_calls).toBeUndefined()
  })

  it('after the tool result, or with tool_choice none, the answer is text (a tool loop ends)', () => {
    const first = asking('call search')
    const call = mockChatCompletion(first, model, now).choices[0]?.message.tool_calls?.[0]
    expect(call?.function.name).toBe('search')
    const next: ChatRequest = {
      ...first,
      messages: [
        ...first.messages,
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: call?.id ?? '', type: 'function', function: { name: 'search', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: call?.id ?? '', content: '{"hits":3}' },
      ],
    }
    const after = mockChatCompletion(next, model, now)
    expect(after.choices[0]?.finish_reason).toBe('stop')
    expect(after.choices[0]?.message.tool_calls).toBeUndefined()
    const none = mockChatCompletion({ ...first, tool_choice: 'none' }, model, now)
    expect(none.choices[0]?.message.tool_calls).toBeUndefined()
  })

  it('allowed_tools auto only calls an allowed tool', () => {
    const req: ChatRequest = {
      ...asking('use get_weather or search'),
      tool_choice: {
        type: 'allowed_tools',
        allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'search' } }] },
      },
    }
    expect(mockChatCompletion(req, model, now).choices[0]?.message.tool_calls?.[0]?.function.name).toBe(
      'search',
    )
  })
})

describe('sliced work', () => {
  const pieces = [
    'word',
    ' ',
    'é',
    'e\u0301',
    '😀',
    '_x9',
    ',',
    '\n\t',
    'ab😀cd',
    '  ',
    '42',
    '中文',
    '\ud800',
  ]
  /** Deterministic pseudo-random text from the pieces above. */
  const randomText = (seed: number, length: number): string => {
    let x = seed
    let text = ''
    while (text.length < length) {
      x = (x * 1103515245 + 12345) % 2 ** 31
      text += pieces[x % pieces.length]
    }
    return text
  }

  it('countTokensSteps counts as countTokens does, whatever the window', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const text = randomText(seed, 50 + (seed % 40))
      for (const window of [1, 2, 3, 7, 16]) {
        expect(finishNow(countTokensSteps(text, window)), `seed ${seed}, window ${window}`).toBe(
          countTokens(text),
        )
      }
    }
  })

  it('countTokensSteps reaches a checkpoint per window', () => {
    const work = countTokensSteps('word '.repeat(100_000))
    let checkpoints = 0
    for (let step = work.next(); !step.done; step = work.next()) checkpoints++
    expect(checkpoints).toBe(Math.floor(500_000 / COUNT_WINDOW))
  })

  it('quotes the start of a huge message as it quoted a short one', () => {
    const text = `  ${'a\u00a0 b\n'.repeat(10)}${'x'.repeat(2_000_000)}`
    const req: ChatRequest = { ...hello, messages: [{ role: 'user', content: text }] }
    const expected = Array.from(text.replace(/\s+/g, ' ').trim()).slice(0, 60).join('')
    expect(mockChatCompletion(req, model, now).choices[0]?.message.content).toContain(`"${expected}"`)
    for (let seed = 1; seed <= 100; seed++) {
      const t = randomText(seed, 130)
      const short: ChatRequest = { ...hello, messages: [{ role: 'user', content: t }] }
      const quoted = Array.from(t.replace(/\s+/g, ' ').trim()).slice(0, 60).join('')
      expect(mockChatCompletion(short, model, now).choices[0]?.message.content).toContain(`"${quoted}": `)
    }
  })

  it('a 2 MB prompt is hashed and counted in slices, and gives the blocking and the streamed answer the same id', () => {
    const req: ChatRequest = { ...hello, messages: [{ role: 'user', content: 'word '.repeat(400_000) }] }
    const work = mockReply(req, model)
    let checkpoints = 0
    let step = work.next()
    for (; !step.done; step = work.next()) checkpoints++
    // Two windows of hashing (plus one for the rest), 30 of counting.
    expect(checkpoints).toBeGreaterThanOrEqual(30)
    expect(step.value.usage.prompt_tokens).toBe(400_000)
    expect(mockChatChunks(req, model, now)[0]?.id).toBe(step.value.id)
    expect(mockChatCompletion(req, model, now).id).toBe(step.value.id)
  })

  it('embeddings reach a checkpoint per input, and count what countTokens counts', () => {
    const input = Array.from({ length: 100 }, (_, i) => `text ${i}, `.repeat(10))
    const work = mockEmbeddingsSteps({ model: 'mock/embed', input }, 'embed')
    let checkpoints = 0
    let step = work.next()
    for (; !step.done; step = work.next()) checkpoints++
    expect(checkpoints).toBe(100)
    expect(step.value.usage.prompt_tokens).toBe(input.reduce((n, t) => n + countTokens(t), 0))
    expect(step.value.data).toHaveLength(100)
  })
})

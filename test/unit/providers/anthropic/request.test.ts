import { describe, expect, it } from 'vitest'
import { DEFAULT_MAX_TOKENS, toAnthropicRequest } from '../../../../src/providers/anthropic/request.ts'
import { resolveReasoning } from '../../../../src/providers/shared/request.ts'
import type { ChatRequest } from '../../../../src/providers/types.ts'
import { thrownGatewayError } from '../../../support/errors.ts'

const MODEL = 'claude-sonnet-4-5'
const base: ChatRequest = {
  model: 'anthropic/claude-sonnet-4-5',
  messages: [{ role: 'user', content: 'Hello' }],
}

const refusal = (req: ChatRequest) => thrownGatewayError(() => toAnthropicRequest(req, MODEL))

const weather = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a given location',
    parameters: {
      type: 'object',
      properties: { location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' } },
      required: ['location'],
    },
  },
}

describe('toAnthropicRequest: messages', () => {
  it('sends the upstream model, a default max_tokens, and user text as blocks', () => {
    expect(toAnthropicRequest(base, MODEL)).toEqual({
      model: MODEL,
      max_tokens: DEFAULT_MAX_TOKENS,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
    })
  })

  it('hoists system and developer messages, in order, into system', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        messages: [
          { role: 'system', content: 'You are a helpful assistant.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
          { role: 'user', content: 'Hello' },
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'And again' },
        ],
      },
      MODEL,
    )
    expect(body.system).toEqual([
      { type: 'text', text: 'You are a helpful assistant.' },
      { type: 'text', text: 'Answer in French.' },
      { type: 'text', text: 'Be brief.' },
    ])
    // The two user turns, now adjacent, are merged: Anthropic alternates roles.
    expect(body.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Hello' },
          { type: 'text', text: 'And again' },
        ],
      },
    ])
  })

  it('keeps a multi-turn conversation in order, merging repeated roles and skipping empty text', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        messages: [
          { role: 'user', content: 'Hello there.' },
          { role: 'assistant', content: 'Hi, I am Claude. How can I help you?' },
          { role: 'assistant', content: '' },
          { role: 'user', content: 'Can you explain LLMs in plain English?' },
          { role: 'user', content: [{ type: 'text', text: '' }] },
        ],
      },
      MODEL,
    )
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'Hello there.' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Hi, I am Claude. How can I help you?' }] },
      { role: 'user', content: [{ type: 'text', text: 'Can you explain LLMs in plain English?' }] },
    ])
  })

  it('trims trailing whitespace of a final (prefilled) assistant turn', () => {
    const body = toAnthropicRequest(
      { ...base, messages: [...base.messages, { role: 'assistant', content: 'The answer is ' }] },
      MODEL,
    )
    expect(body.messages.at(-1)).toEqual({
      role: 'assistant',
      content: [{ type: 'text', text: 'The answer is' }],
    })
  })

  it('refuses a conversation with nothing but system messages', () => {
    const e = refusal({ ...base, messages: [{ role: 'system', content: 'sys' }] })
    expect(e).toMatchObject({ status: 400, code: 'invalid_value', param: 'messages' })
  })

  it('turns images into base64 or URL sources and keeps cache_control on parts', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Compare these.', cache_control: { type: 'ephemeral' } },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'high' } },
              { type: 'image_url', image_url: { url: 'https://upload.wikimedia.org/a.jpg' } },
              {
                type: 'file',
                file: { filename: 'paper.pdf', file_data: 'data:application/pdf;base64,JVBERi0x' },
              },
            ],
          },
        ],
      },
      MODEL,
    )
    expect(body.messages[0]!.content).toEqual([
      { type: 'text', text: 'Compare these.', cache_control: { type: 'ephemeral' } },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
      { type: 'image', source: { type: 'url', url: 'https://upload.wikimedia.org/a.jpg' } },
      { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0x' } },
    ])
  })

  it('refuses image types Anthropic cannot read, naming the part', () => {
    const e = refusal({
      ...base,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'x' },
            { type: 'image_url', image_url: { url: 'data:image/bmp;base64,Qk0=' } },
          ],
        },
      ],
    })
    expect(e).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'messages[0].content[1].image_url.url',
    })
    expect(
      refusal({
        ...base,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x' } }] }],
      }),
    ).toMatchObject({ param: 'messages[0].content[0].image_url.url' })
  })

  it('sends a plain-text file as a text document', () => {
    const data = `data:text/plain;base64,${Buffer.from('line one').toString('base64')}`
    const body = toAnthropicRequest(
      {
        ...base,
        messages: [
          { role: 'user', content: [{ type: 'file', file: { filename: 'a.txt', file_data: data } }] },
        ],
      },
      MODEL,
    )
    expect(body.messages[0]!.content).toEqual([
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'line one' } },
    ])
  })

  it('refuses audio input parts', () => {
    const e = refusal({
      ...base,
      messages: [
        { role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'AAA=', format: 'wav' } }] },
      ],
    })
    expect(e).toMatchObject({ code: 'unsupported_parameter', param: 'messages[0].content[0].type' })
  })

  it('refuses content parts of a kind it does not know', () => {
    const e = refusal({
      ...base,
      messages: [
        { role: 'user', content: [{ type: 'video_url', video_url: { url: 'https://example.com/v.mp4' } }] },
      ],
    })
    expect(e).toMatchObject({ code: 'unsupported_parameter', param: 'messages[0].content[0].type' })
    expect(e.message).toContain('"video_url"')
  })
})

describe('toAnthropicRequest: tools', () => {
  // The documented multi-turn tool use: assistant tool_use → user tool_result → follow-up.
  const conversation: ChatRequest['messages'] = [
    { role: 'user', content: 'What is the weather like in Paris and in Tokyo?' },
    {
      role: 'assistant',
      content: "I'll check both.",
      tool_calls: [
        {
          id: 'toolu_01A09q90qw90lq917835lq9',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Paris, France"}' },
        },
        {
          id: 'call_0_get.weather',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Tokyo, Japan"}' },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'toolu_01A09q90qw90lq917835lq9', content: '15 degrees' },
    { role: 'tool', tool_call_id: 'call_0_get.weather', content: [{ type: 'text', text: '22 degrees' }] },
    { role: 'user', content: 'Which is warmer?' },
  ]

  it('maps tool calls to tool_use and tool messages to tool_result blocks first in one user turn', () => {
    const body = toAnthropicRequest({ ...base, messages: conversation, tools: [weather] }, MODEL)
    expect(body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'What is the weather like in Paris and in Tokyo?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: "I'll check both." },
          {
            type: 'tool_use',
            id: 'toolu_01A09q90qw90lq917835lq9',
            name: 'get_weather',
            input: { location: 'Paris, France' },
          },
          // Ids from elsewhere are made to fit Anthropic's pattern, the same way on both sides.
          {
            type: 'tool_use',
            id: 'call_0_get_weather',
            name: 'get_weather',
            input: { location: 'Tokyo, Japan' },
          },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_01A09q90qw90lq917835lq9', content: '15 degrees' },
          {
            type: 'tool_result',
            tool_use_id: 'call_0_get_weather',
            content: [{ type: 'text', text: '22 degrees' }],
          },
          { type: 'text', text: 'Which is warmer?' },
        ],
      },
    ])
    expect(body.tools).toEqual([
      {
        name: 'get_weather',
        description: 'Get the current weather in a given location',
        input_schema: weather.function.parameters,
      },
    ])
    expect(body.tool_choice).toEqual({ type: 'auto' })
  })

  it('refuses tool call arguments that are not a JSON object', () => {
    const e = refusal({
      ...base,
      messages: [
        base.messages[0]!,
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'x', type: 'function', function: { name: 'get_weather', arguments: '[1,2' } }],
        },
      ],
    })
    expect(e).toMatchObject({ code: 'invalid_value', param: 'messages[1].tool_calls[0].function.arguments' })
  })

  it.each([
    ['none', { type: 'none' }],
    ['auto', { type: 'auto' }],
    ['required', { type: 'any' }],
    [
      { type: 'function', function: { name: 'get_weather' } },
      { type: 'tool', name: 'get_weather' },
    ],
  ] as const)('maps tool_choice %j', (choice, expected) => {
    expect(toAnthropicRequest({ ...base, tools: [weather], tool_choice: choice }, MODEL).tool_choice).toEqual(
      expected,
    )
  })

  it('turns parallel_tool_calls: false into disable_parallel_tool_use', () => {
    const body = toAnthropicRequest(
      { ...base, tools: [weather], tool_choice: 'required', parallel_tool_calls: false },
      MODEL,
    )
    expect(body.tool_choice).toEqual({ type: 'any', disable_parallel_tool_use: true })
  })

  it('narrows tools to an allowed_tools choice', () => {
    const other = {
      type: 'function' as const,
      function: { name: 'get_time', parameters: { type: 'object' } },
    }
    const body = toAnthropicRequest(
      {
        ...base,
        tools: [weather, other],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'get_time' } }] },
        },
      },
      MODEL,
    )
    expect(body.tools?.map((t) => t.name)).toEqual(['get_time'])
    expect(body.tool_choice).toEqual({ type: 'any' })
  })

  it('refuses a named tool_choice that is not among the tools, and custom tools', () => {
    expect(
      refusal({ ...base, tools: [weather], tool_choice: { type: 'function', function: { name: 'nope' } } }),
    ).toMatchObject({ code: 'invalid_value', param: 'tool_choice.function.name' })
    expect(refusal({ ...base, tools: [{ type: 'custom', custom: { name: 'grammar' } }] })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'tools[0].type',
    })
  })

  it('gives a tool without parameters an empty object schema', () => {
    const body = toAnthropicRequest(
      { ...base, tools: [{ type: 'function', function: { name: 'ping' } }] },
      MODEL,
    )
    expect(body.tools).toEqual([{ name: 'ping', input_schema: { type: 'object', properties: {} } }])
  })
})

describe('toAnthropicRequest: reasoning round trip', () => {
  it('restores thinking and redacted_thinking blocks before the text and tool_use blocks', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        tools: [weather],
        reasoning: { enabled: true, max_tokens: 2048 },
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          {
            role: 'assistant',
            content: '',
            reasoning: 'The user wants…',
            reasoning_details: [
              { type: 'reasoning.encrypted', data: 'EmwKAhgB', format: 'anthropic-claude-v1', index: 1 },
              {
                type: 'reasoning.text',
                text: 'The user wants the weather.',
                signature: 'WaUjzkyp',
                format: 'anthropic-claude-v1',
                index: 0,
              },
              // Another provider's signature means nothing to Anthropic: not sent.
              { type: 'reasoning.encrypted', data: 'CiQBVKhc', format: 'google-gemini-v1', index: 2 },
              // No signature: cannot be verified, not sent.
              { type: 'reasoning.text', text: 'unsigned', format: 'anthropic-claude-v1', index: 3 },
            ],
            tool_calls: [
              {
                id: 'toolu_01',
                type: 'function',
                function: { name: 'get_weather', arguments: '{"location":"Paris"}' },
              },
            ],
          },
          { role: 'tool', tool_call_id: 'toolu_01', content: '15 degrees' },
        ],
      },
      MODEL,
    )
    expect(body.messages[1]).toEqual({
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'The user wants the weather.', signature: 'WaUjzkyp' },
        { type: 'redacted_thinking', data: 'EmwKAhgB' },
        { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { location: 'Paris' } },
      ],
    })
  })

  it('takes the thinking budget from reasoning.max_tokens and drops temperature and top_p', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        reasoning: { enabled: true, max_tokens: 4000 },
        max_completion_tokens: 16000,
        temperature: 0.3,
      },
      MODEL,
    )
    expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: 4000 })
    expect(body.max_tokens).toBe(16000)
    expect(body).not.toHaveProperty('temperature')
  })

  it('takes a share of max_completion_tokens by effort, and adds the default when the client gives none', () => {
    expect(
      toAnthropicRequest({ ...base, reasoning_effort: 'high', max_completion_tokens: 10000 }, MODEL).thinking,
    ).toEqual({ type: 'enabled', budget_tokens: 8000 })
    const noMax = toAnthropicRequest({ ...base, reasoning: { enabled: true, effort: 'low' } }, MODEL)
    expect(noMax.thinking).toEqual({ type: 'enabled', budget_tokens: 2048 })
    expect(noMax.max_tokens).toBe(2048 + DEFAULT_MAX_TOKENS)
  })

  it('refuses a max_completion_tokens that leaves no room for the thinking budget', () => {
    const e = refusal({
      ...base,
      reasoning: { enabled: true, max_tokens: 3000 },
      max_completion_tokens: 2000,
    })
    expect(e).toMatchObject({ status: 400, code: 'invalid_value', param: 'max_completion_tokens' })
  })

  it('sends no thinking when reasoning is off', () => {
    expect(
      toAnthropicRequest({ ...base, reasoning: { enabled: false, effort: 'high' } }, MODEL),
    ).not.toHaveProperty('thinking')
    expect(toAnthropicRequest({ ...base, reasoning_effort: 'none' }, MODEL)).not.toHaveProperty('thinking')
  })

  it('resolves reasoning from either control', () => {
    expect(resolveReasoning(base)).toBeUndefined()
    expect(resolveReasoning({ ...base, reasoning_effort: 'minimal' })).toEqual({
      enabled: true,
      effort: 'low',
      exclude: false,
    })
    expect(
      resolveReasoning({ ...base, reasoning: { enabled: true, exclude: true }, reasoning_effort: 'xhigh' }),
    ).toEqual({
      enabled: true,
      effort: 'high',
      maxTokens: undefined,
      exclude: true,
    })
  })
})

describe('toAnthropicRequest: sampling and output controls', () => {
  it('clamps temperature to 1, keeps top_p alone, maps stop, user and max_completion_tokens', () => {
    const body = toAnthropicRequest(
      { ...base, temperature: 1.7, stop: ['\n\nHuman:'], user: 'user-123', max_completion_tokens: 300 },
      MODEL,
    )
    expect(body).toMatchObject({
      temperature: 1,
      stop_sequences: ['\n\nHuman:'],
      metadata: { user_id: 'user-123' },
      max_tokens: 300,
    })
    expect(toAnthropicRequest({ ...base, top_p: 0.9 }, MODEL).top_p).toBe(0.9)
    // Current Claude models refuse both together: temperature wins.
    const both = toAnthropicRequest({ ...base, top_p: 0.9, temperature: 0.2, stop: 'END' }, MODEL)
    expect(both).toMatchObject({ temperature: 0.2, stop_sequences: ['END'] })
    expect(both).not.toHaveProperty('top_p')
  })

  it('maps json_schema to output_config and json_object to a system instruction', () => {
    const schema = {
      type: 'object',
      properties: { answer: { type: 'string' } },
      required: ['answer'],
      additionalProperties: false,
    }
    const structured = toAnthropicRequest(
      {
        ...base,
        response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
      },
      MODEL,
    )
    expect(structured.output_config).toEqual({ format: { type: 'json_schema', schema } })
    const anyJson = toAnthropicRequest({ ...base, response_format: { type: 'json_object' } }, MODEL)
    expect(anyJson.system?.at(-1)?.text).toMatch(/JSON object/)
    expect(anyJson).not.toHaveProperty('output_config')
  })

  it('drops fields Anthropic has no use for', () => {
    const body = toAnthropicRequest(
      {
        ...base,
        frequency_penalty: 0.5,
        presence_penalty: 0.5,
        seed: 7,
        metadata: { a: 'b' },
        verbosity: 'low',
        store: true,
        some_future_field: 1,
        provider: { routing: { type: 'priority', providers: ['anthropic'] } },
      },
      MODEL,
    )
    expect(Object.keys(body).sort()).toEqual(['max_tokens', 'messages', 'model'])
  })

  it.each([
    ['logit_bias', { logit_bias: { '50256': -100 } }],
    ['logprobs', { logprobs: true }],
    ['top_logprobs', { top_logprobs: 3 }],
    ['web_search_options', { web_search_options: {} }],
    ['modalities', { modalities: ['text', 'audio'] }],
  ])('refuses %s with unsupported_parameter', (param, fields) => {
    expect(refusal({ ...base, ...fields })).toMatchObject({
      status: 400,
      type: 'invalid_request_error',
      code: 'unsupported_parameter',
      param,
    })
  })

  it('sets stream only when streaming', () => {
    expect(toAnthropicRequest({ ...base, stream: true }, MODEL).stream).toBe(true)
    expect(toAnthropicRequest(base, MODEL)).not.toHaveProperty('stream')
  })
})

import { describe, expect, it } from 'vitest'
import {
  toGeminiEmbedRequest,
  toGeminiRequest,
  toThinkingConfig,
} from '../../../../src/providers/gemini/request.ts'
import type { ChatRequest } from '../../../../src/providers/types.ts'
import { thrownGatewayError as refusal } from '../../../support/errors.ts'

const MODEL = 'gemini-2.5-flash'
const base: ChatRequest = { model: 'google/gemini-2.5-flash', messages: [{ role: 'user', content: 'Hello' }] }

const weather = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a given location',
    parameters: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      properties: {
        location: { type: 'string', description: 'The city and state' },
        unit: { type: ['string', 'null'], enum: ['celsius', 'fahrenheit', null] },
      },
      required: ['location'],
      additionalProperties: false,
    },
  },
}

describe('toGeminiRequest: contents', () => {
  it('sends user text as a user content and nothing else by default', () => {
    expect(toGeminiRequest(base, MODEL)).toEqual({ contents: [{ role: 'user', parts: [{ text: 'Hello' }] }] })
  })

  it('puts system and developer messages in systemInstruction and maps roles', () => {
    const body = toGeminiRequest(
      {
        ...base,
        messages: [
          { role: 'system', content: 'You are a cat. Your name is Neko.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer briefly.' }] },
          { role: 'user', content: 'Hello there' },
          { role: 'assistant', content: 'Great to meet you. What would you like to know?' },
          { role: 'user', content: 'I have two dogs in my house.' },
          { role: 'user', content: 'How many paws are in my house?' },
        ],
      },
      MODEL,
    )
    expect(body.systemInstruction).toEqual({
      parts: [{ text: 'You are a cat. Your name is Neko.' }, { text: 'Answer briefly.' }],
    })
    expect(body.contents).toEqual([
      { role: 'user', parts: [{ text: 'Hello there' }] },
      { role: 'model', parts: [{ text: 'Great to meet you. What would you like to know?' }] },
      {
        role: 'user',
        parts: [{ text: 'I have two dogs in my house.' }, { text: 'How many paws are in my house?' }],
      },
    ])
  })

  it('sends images inline (data URLs) or as fileData (http URLs), audio and files inline', () => {
    const body = toGeminiRequest(
      {
        ...base,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'Caption these.' },
              { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,/9j/4AAQ' } },
              { type: 'image_url', image_url: { url: 'https://example.com/photos/cat.png?size=large' } },
              { type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } },
              {
                type: 'file',
                file: { filename: 'report.pdf', file_data: 'data:application/pdf;base64,JVBERi0x' },
              },
            ],
          },
        ],
      },
      MODEL,
    )
    expect(body.contents[0]!.parts).toEqual([
      { text: 'Caption these.' },
      { inlineData: { mimeType: 'image/jpeg', data: '/9j/4AAQ' } },
      { fileData: { mimeType: 'image/png', fileUri: 'https://example.com/photos/cat.png?size=large' } },
      { inlineData: { mimeType: 'audio/wav', data: 'UklGRg==' } },
      { inlineData: { mimeType: 'application/pdf', data: 'JVBERi0x' } },
    ])
  })

  it('refuses content parts of a kind it does not translate, naming the part', () => {
    const e = refusal(() =>
      toGeminiRequest(
        {
          ...base,
          messages: [
            {
              role: 'user',
              content: [
                { type: 'text', text: 'Watch this.' },
                { type: 'video_url', video_url: { url: 'https://example.com/v.mp4' } },
              ],
            },
          ],
        },
        MODEL,
      ),
    )
    expect(e).toMatchObject({
      status: 400,
      code: 'unsupported_parameter',
      param: 'messages[0].content[1].type',
    })
  })

  it('refuses an image that is neither a URL nor a data URL, naming the part', () => {
    const e = refusal(() =>
      toGeminiRequest(
        {
          ...base,
          messages: [
            { role: 'user', content: [{ type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] },
          ],
        },
        MODEL,
      ),
    )
    expect(e).toMatchObject({
      status: 400,
      code: 'invalid_value',
      param: 'messages[0].content[0].image_url.url',
    })
  })

  it('refuses a conversation with nothing but system messages', () => {
    const e = refusal(() => toGeminiRequest({ ...base, messages: [{ role: 'system', content: 'x' }] }, MODEL))
    expect(e).toMatchObject({ code: 'invalid_value', param: 'messages' })
  })
})

describe('toGeminiRequest: function calling', () => {
  it('declares functions with their schema converted to the subset Gemini accepts', () => {
    const body = toGeminiRequest({ ...base, tools: [weather] }, MODEL)
    expect(body.tools).toEqual([
      {
        functionDeclarations: [
          {
            name: 'get_weather',
            description: 'Get the current weather in a given location',
            parameters: {
              type: 'OBJECT',
              properties: {
                location: { type: 'STRING', description: 'The city and state' },
                unit: { type: 'STRING', nullable: true },
              },
              required: ['location'],
            },
          },
        ],
      },
    ])
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: 'AUTO' } })
  })

  it('leaves out parameters of a function that takes none (Gemini rejects an empty OBJECT)', () => {
    const body = toGeminiRequest(
      {
        ...base,
        tools: [
          { type: 'function', function: { name: 'now', parameters: { type: 'object', properties: {} } } },
        ],
      },
      MODEL,
    )
    expect(body.tools).toEqual([{ functionDeclarations: [{ name: 'now' }] }])
  })

  it.each([
    ['none', { mode: 'NONE' }],
    ['auto', { mode: 'AUTO' }],
    ['required', { mode: 'ANY' }],
    [
      { type: 'function', function: { name: 'get_weather' } },
      { mode: 'ANY', allowedFunctionNames: ['get_weather'] },
    ],
  ] as const)('maps tool_choice %j', (choice, expected) => {
    expect(toGeminiRequest({ ...base, tools: [weather], tool_choice: choice }, MODEL).toolConfig).toEqual({
      functionCallingConfig: expected,
    })
  })

  it('narrows the declarations to an allowed_tools choice', () => {
    const other = { type: 'function' as const, function: { name: 'get_time' } }
    const body = toGeminiRequest(
      {
        ...base,
        tools: [weather, other],
        tool_choice: {
          type: 'allowed_tools',
          allowed_tools: { mode: 'auto', tools: [{ type: 'function', name: 'get_time' }] },
        },
      },
      MODEL,
    )
    expect(body.tools).toEqual([{ functionDeclarations: [{ name: 'get_time' }] }])
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: 'AUTO' } })
  })

  // The documented parallel function calling turn, with Junction's ids, and a thought signature on
  // the first call only (Gemini 3).
  const parallel: ChatRequest['messages'] = [
    { role: 'user', content: 'Weather in Paris and Tokyo?' },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        {
          id: 'call_0_get_weather',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Paris"}' },
        },
        {
          id: 'call_1_get_weather',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Tokyo"}' },
        },
      ],
      reasoning_details: [
        {
          type: 'reasoning.encrypted',
          data: 'CiQBVKhc',
          id: 'call_0_get_weather',
          format: 'google-gemini-v1',
          index: 0,
        },
        { type: 'reasoning.text', text: 'thinking…', format: 'google-gemini-v1', index: 1 },
        {
          type: 'reasoning.text',
          text: 'x',
          signature: 'anthropic-sig',
          format: 'anthropic-claude-v1',
          index: 2,
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_0_get_weather', content: '{"temperature": 15, "unit": "celsius"}' },
    { role: 'tool', tool_call_id: 'call_1_get_weather', content: 'sunny, 22 degrees' },
  ]

  it('sends tool calls back as functionCall parts with their signature, and tool results as functionResponse parts', () => {
    const body = toGeminiRequest(
      { ...base, model: 'google/gemini-3-pro-preview', messages: parallel, tools: [weather] },
      'gemini-3-pro-preview',
    )
    expect(body.contents).toEqual([
      { role: 'user', parts: [{ text: 'Weather in Paris and Tokyo?' }] },
      {
        role: 'model',
        parts: [
          {
            functionCall: { name: 'get_weather', args: { location: 'Paris' } },
            thoughtSignature: 'CiQBVKhc',
          },
          { functionCall: { name: 'get_weather', args: { location: 'Tokyo' } } },
        ],
      },
      {
        role: 'user',
        parts: [
          { functionResponse: { name: 'get_weather', response: { temperature: 15, unit: 'celsius' } } },
          { functionResponse: { name: 'get_weather', response: { result: 'sunny, 22 degrees' } } },
        ],
      },
    ])
  })

  it('puts a signature without a tool call id back on the text part', () => {
    const body = toGeminiRequest(
      {
        ...base,
        messages: [
          base.messages[0]!,
          {
            role: 'assistant',
            content: '1+1 equals 2.',
            reasoning_details: [
              { type: 'reasoning.encrypted', data: 'EjQKMgEM', format: 'google-gemini-v1', index: 0 },
            ],
          },
          { role: 'user', content: 'And 2+2?' },
        ],
      },
      MODEL,
    )
    expect(body.contents[1]).toEqual({
      role: 'model',
      parts: [{ text: '1+1 equals 2.', thoughtSignature: 'EjQKMgEM' }],
    })
  })

  it('refuses a tool message whose id matches no earlier tool call', () => {
    const e = refusal(() =>
      toGeminiRequest(
        { ...base, messages: [base.messages[0]!, { role: 'tool', tool_call_id: 'call_9_x', content: 'r' }] },
        MODEL,
      ),
    )
    expect(e).toMatchObject({ code: 'invalid_value', param: 'messages[1].tool_call_id' })
  })
})

describe('toGeminiRequest: generation config', () => {
  it('maps sampling, limits, stop, seed, penalties and JSON output', () => {
    const body = toGeminiRequest(
      {
        ...base,
        temperature: 1.4,
        top_p: 0.9,
        max_completion_tokens: 800,
        stop: 'END',
        seed: 42,
        presence_penalty: 0.5,
        frequency_penalty: -0.5,
        response_format: {
          type: 'json_schema',
          json_schema: {
            name: 'recipe',
            schema: {
              type: 'array',
              items: {
                type: 'object',
                properties: {
                  recipeName: { type: 'string' },
                  ingredients: { type: 'array', items: { type: 'string' } },
                },
                propertyOrdering: ['recipeName', 'ingredients'],
              },
            },
          },
        },
      },
      MODEL,
    )
    expect(body.generationConfig).toEqual({
      temperature: 1.4,
      topP: 0.9,
      maxOutputTokens: 800,
      stopSequences: ['END'],
      seed: 42,
      presencePenalty: 0.5,
      frequencyPenalty: -0.5,
      responseMimeType: 'application/json',
      responseSchema: {
        type: 'ARRAY',
        items: {
          type: 'OBJECT',
          properties: {
            recipeName: { type: 'STRING' },
            ingredients: { type: 'ARRAY', items: { type: 'STRING' } },
          },
          propertyOrdering: ['recipeName', 'ingredients'],
        },
      },
    })
    expect(
      toGeminiRequest({ ...base, response_format: { type: 'json_object' } }, MODEL).generationConfig,
    ).toEqual({
      responseMimeType: 'application/json',
    })
  })

  it.each([
    ['logit_bias', { logit_bias: { '42': 10 } }],
    ['logprobs', { logprobs: true }],
    ['web_search_options', { web_search_options: { search_context_size: 'low' } }],
    ['audio', { audio: { voice: 'alloy', format: 'wav' } }],
  ])('refuses %s with unsupported_parameter', (param, fields) => {
    expect(refusal(() => toGeminiRequest({ ...base, ...fields } as ChatRequest, MODEL))).toMatchObject({
      status: 400,
      code: 'unsupported_parameter',
      param,
    })
  })

  it('drops fields Gemini has no use for', () => {
    const body = toGeminiRequest(
      {
        ...base,
        parallel_tool_calls: false,
        user: 'u1',
        metadata: { a: 'b' },
        verbosity: 'low',
        some_future_field: 1,
      },
      MODEL,
    )
    expect(body).toEqual({ contents: [{ role: 'user', parts: [{ text: 'Hello' }] }] })
  })
})

describe('toThinkingConfig', () => {
  it.each([
    ['no reasoning asked', {}, MODEL, undefined],
    [
      'a budget',
      { reasoning: { enabled: true, max_tokens: 2000 } },
      MODEL,
      { thinkingBudget: 2000, includeThoughts: true },
    ],
    [
      'an effort on 2.5',
      { reasoning_effort: 'high' },
      MODEL,
      { thinkingBudget: 24576, includeThoughts: true },
    ],
    [
      'an effort on 3',
      { reasoning_effort: 'low' },
      'gemini-3-pro-preview',
      { thinkingLevel: 'low', includeThoughts: true },
    ],
    ['on with no effort', { reasoning: { enabled: true } }, MODEL, { includeThoughts: true }],
    [
      'exclude',
      { reasoning: { enabled: true, exclude: true, effort: 'low' } },
      MODEL,
      { thinkingBudget: 1024, includeThoughts: false },
    ],
    ['off on Flash', { reasoning: { enabled: false } }, MODEL, { thinkingBudget: 0 }],
    ['off on 2.5 Pro (cannot stop thinking)', { reasoning_effort: 'none' }, 'gemini-2.5-pro', undefined],
    ['off on 3', { reasoning_effort: 'none' }, 'gemini-3-flash-preview', { thinkingLevel: 'low' }],
    [
      'a budget on 3 becomes a level, never thinkingBudget',
      { reasoning: { enabled: true, max_tokens: 5000 } },
      'gemini-3-pro-preview',
      { thinkingLevel: 'high', includeThoughts: true },
    ],
    [
      'a small budget on 3 is low',
      { reasoning: { enabled: true, max_tokens: 4096 } },
      'gemini-3-pro-preview',
      { thinkingLevel: 'low', includeThoughts: true },
    ],
  ] as const)('%s', (_name, fields, model, expected) => {
    expect(toThinkingConfig({ ...base, ...fields } as ChatRequest, model)).toEqual(expected)
  })

  it('lands in generationConfig', () => {
    expect(toGeminiRequest({ ...base, reasoning_effort: 'medium' }, MODEL).generationConfig).toEqual({
      thinkingConfig: { thinkingBudget: 8192, includeThoughts: true },
    })
  })
})

describe('toGeminiEmbedRequest', () => {
  it('builds one request per input with task type and output dimensionality', () => {
    expect(
      toGeminiEmbedRequest(
        {
          model: 'google/gemini-embedding-001',
          input: ['first', 'second'],
          dimensions: 768,
          input_type: 'search_query',
        },
        'gemini-embedding-001',
      ),
    ).toEqual({
      requests: [
        {
          model: 'models/gemini-embedding-001',
          content: { parts: [{ text: 'first' }] },
          taskType: 'RETRIEVAL_QUERY',
          outputDimensionality: 768,
        },
        {
          model: 'models/gemini-embedding-001',
          content: { parts: [{ text: 'second' }] },
          taskType: 'RETRIEVAL_QUERY',
          outputDimensionality: 768,
        },
      ],
    })
    expect(
      toGeminiEmbedRequest({ model: 'g/e', input: 'one', input_type: 'CODE_RETRIEVAL_QUERY' }, 'e')
        .requests[0]!.taskType,
    ).toBe('CODE_RETRIEVAL_QUERY')
  })

  it('refuses token-id input and unknown input types', () => {
    expect(refusal(() => toGeminiEmbedRequest({ model: 'g/e', input: [1, 2, 3] }, 'e'))).toMatchObject({
      code: 'unsupported_parameter',
      param: 'input',
    })
    expect(
      refusal(() => toGeminiEmbedRequest({ model: 'g/e', input: 'x', input_type: 'poetry' }, 'e')),
    ).toMatchObject({
      code: 'invalid_value',
      param: 'input_type',
    })
  })
})

import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { CHAT_LIMITS, isKnownContentPart, parseChatRequest } from '../../../src/schemas/chat.ts'

const user = { role: 'user', content: 'Hello' }
const minimal = { model: 'openai/gpt-4o-mini', messages: [user] }

/** The minimal request with `patch` applied on top. */
const withFields = (patch: Record<string, unknown>): Record<string, unknown> => ({ ...minimal, ...patch })
const withMessages = (...messages: unknown[]): Record<string, unknown> => withFields({ messages })

function rejection(body: unknown): GatewayError {
  try {
    parseChatRequest(body)
  } catch (e) {
    if (e instanceof GatewayError) return e
    throw e
  }
  throw new Error('expected the request to be rejected')
}

const metadataOf = (count: number): Record<string, string> =>
  Object.fromEntries(Array.from({ length: count }, (_, i) => [`k${i}`, 'v']))

describe('parseChatRequest: valid requests', () => {
  it('accepts the minimal request unchanged', () => {
    expect(parseChatRequest(minimal)).toEqual(minimal)
  })

  it('accepts a rich request and keeps unknown fields at every level', () => {
    const body = {
      model: 'anthropic/claude-sonnet-4/20250514',
      messages: [
        { role: 'developer', content: 'Be brief.' },
        {
          role: 'system',
          content: [{ type: 'text', text: 'You are helpful.' }],
          cache_control: { type: 'ephemeral' },
        },
        {
          role: 'user',
          name: 'alice',
          content: [
            { type: 'text', text: 'What is in these?' },
            { type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'high' } },
            { type: 'image_url', image_url: { url: 'file-abc123' } },
            { type: 'file', file: { file_id: 'file-abc123' } },
            { type: 'file', file: { file_data: 'data:application/pdf;base64,AAAA', filename: 'a.pdf' } },
            { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          refusal: null,
          reasoning: 'Let me look.',
          reasoning_details: [
            {
              type: 'reasoning.text',
              text: 'Let me look.',
              signature: 'sig',
              format: 'x',
              index: 0,
              id: 'r1',
            },
          ],
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"cat"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"answer":"a cat"}' },
        { role: 'assistant', content: 'A cat.', function_call_extra: true },
        { role: 'assistant', function_call: { name: 'lookup', arguments: '{}' } },
      ],
      max_completion_tokens: 1024,
      max_tokens: null,
      temperature: 0.2,
      top_p: 0.9,
      n: 1,
      frequency_penalty: -2,
      presence_penalty: 2,
      stop: ['\n\n', 'END'],
      logit_bias: { '50256': -100, '11': 100 },
      logprobs: true,
      top_logprobs: 20,
      tools: [
        {
          type: 'function',
          function: {
            name: 'lookup',
            description: 'Looks things up',
            parameters: { type: 'object', properties: { q: { type: 'string' } } },
            strict: true,
          },
        },
        { type: 'custom', custom: { name: 'grammar_tool', format: { type: 'text' } } },
      ],
      tool_choice: {
        type: 'allowed_tools',
        allowed_tools: { mode: 'auto', tools: [{ type: 'function', name: 'lookup' }] },
      },
      parallel_tool_calls: false,
      reasoning_effort: 'xhigh',
      verbosity: 'low',
      web_search_options: {
        search_context_size: 'high',
        user_location: {
          type: 'approximate',
          approximate: { city: 'Berlin', country: 'DE', region: 'Berlin', timezone: 'Europe/Berlin' },
        },
      },
      metadata: { ...metadataOf(15), ['k'.repeat(64)]: 'v'.repeat(512) },
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'n'.repeat(64), description: 'd', schema: { type: 'object' }, strict: true },
      },
      stream: true,
      stream_options: { include_usage: true, include_obfuscation: false },
      reasoning: { enabled: true, effort: 'high', max_tokens: 2000, exclude: true, usage: { include: true } },
      provider: {
        routing: { type: 'priority', primary_factor: 'cost', providers: ['openai', 'azure'] },
        fallback: 'groq',
      },
      model_routing_config: {
        available_models: ['openai/gpt-4o', 'anthropic/claude'],
        preference: 'cheap',
        task_info: { task_type: 'chat', complexity: 'medium' },
      },
      seed: 42,
      user: 'user-1',
      future_field: { nested: [1, 2] },
    }
    const parsed = parseChatRequest(body)
    expect(parsed).toEqual(body)
    expect(parsed.future_field).toEqual({ nested: [1, 2] })
    expect(parsed.messages[1]?.cache_control).toEqual({ type: 'ephemeral' })
  })

  it.each<[string, Record<string, unknown>]>([
    ['stop as one string', withFields({ stop: 'END' })],
    ['stop null', withFields({ stop: null })],
    ['four stop strings', withFields({ stop: ['a', 'b', 'c', 'd'] })],
    ['stream_options null without stream', withFields({ stream_options: null })],
    ['logprobs without top_logprobs', withFields({ logprobs: false })],
    ['tool_choice as a string', withFields({ tool_choice: 'required' })],
    [
      'named function tool_choice',
      withFields({ tool_choice: { type: 'function', function: { name: 'f' } } }),
    ],
    ['named custom tool_choice', withFields({ tool_choice: { type: 'custom', custom: { name: 'g' } } })],
    ['response_format text', withFields({ response_format: { type: 'text' } })],
    ['response_format json_object', withFields({ response_format: { type: 'json_object' } })],
    ['user_location null', withFields({ web_search_options: { user_location: null } })],
    ['max_completion_tokens null', withFields({ max_completion_tokens: null })],
    ['assistant with empty string content', withMessages(user, { role: 'assistant', content: '' })],
    ['a model name with slashes', withFields({ model: 'openrouter/meta-llama/llama-3-8b' })],
    [
      'a refusal part sent back in an assistant message',
      withMessages(user, { role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] }),
    ],
    // Kinds the gateway does not know pass unchecked: OpenAI-compatible upstreams get them as they are.
    [
      'a content part of an unknown kind',
      withMessages({ role: 'user', content: [{ type: 'video_url', video_url: { url: 'https://x/v.mp4' } }] }),
    ],
  ])('accepts %s', (_, body) => {
    expect(parseChatRequest(body)).toEqual(body)
  })
})

describe('parseChatRequest: rejected requests', () => {
  it.each<[string, unknown, string | null, string]>([
    // body
    ['a null body', null, null, 'invalid_value'],
    ['an array body', [minimal], null, 'invalid_value'],
    ['a string body', 'hello', null, 'invalid_value'],
    // model
    ['a missing model', { messages: [user] }, 'model', 'missing_field'],
    // A bare name (`gpt-4o`) is well-formed: it may be an alias (the router answers 404 if it is none).
    ['a model with spaces', withFields({ model: 'gpt 4o' }), 'model', 'invalid_value'],
    ['a model with an empty provider', withFields({ model: '/gpt-4o' }), 'model', 'invalid_value'],
    ['a model with an empty name', withFields({ model: 'openai/' }), 'model', 'invalid_value'],
    ['a non-string model', withFields({ model: 4 }), 'model', 'invalid_value'],
    // sampling
    ['temperature 2.5', withFields({ temperature: 2.5 }), 'temperature', 'invalid_value'],
    ['temperature -0.1', withFields({ temperature: -0.1 }), 'temperature', 'invalid_value'],
    ['a string temperature', withFields({ temperature: 'hot' }), 'temperature', 'invalid_value'],
    ['top_p -1', withFields({ top_p: -1 }), 'top_p', 'invalid_value'],
    ['top_p 1.5', withFields({ top_p: 1.5 }), 'top_p', 'invalid_value'],
    ['n 2', withFields({ n: 2 }), 'n', 'unsupported_parameter'],
    ['n 128', withFields({ n: 128 }), 'n', 'unsupported_parameter'],
    ['n 0', withFields({ n: 0 }), 'n', 'invalid_value'],
    ['n 129', withFields({ n: 129 }), 'n', 'invalid_value'],
    ['n 1.5', withFields({ n: 1.5 }), 'n', 'invalid_value'],
    ['frequency_penalty -2.1', withFields({ frequency_penalty: -2.1 }), 'frequency_penalty', 'invalid_value'],
    ['presence_penalty 2.1', withFields({ presence_penalty: 2.1 }), 'presence_penalty', 'invalid_value'],
    [
      'max_completion_tokens 0',
      withFields({ max_completion_tokens: 0 }),
      'max_completion_tokens',
      'invalid_value',
    ],
    [
      'max_completion_tokens 1.5',
      withFields({ max_completion_tokens: 1.5 }),
      'max_completion_tokens',
      'invalid_value',
    ],
    ['max_tokens -1', withFields({ max_tokens: -1 }), 'max_tokens', 'invalid_value'],
    // JSON.parse turns 1e309 into Infinity.
    ['seed 1e309', withFields({ seed: JSON.parse('1e309') }), 'seed', 'invalid_value'],
    ['seed past the safe integers', withFields({ seed: 2 ** 53 }), 'seed', 'invalid_value'],
    ['seed 1.5', withFields({ seed: 1.5 }), 'seed', 'invalid_value'],
    ['a string seed', withFields({ seed: '42' }), 'seed', 'invalid_value'],
    ['five stop strings', withFields({ stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop', 'invalid_value'],
    ['a numeric stop', withFields({ stop: 5 }), 'stop', 'invalid_value'],
    // logprobs and logit_bias
    [
      'a logit_bias value of 101',
      withFields({ logit_bias: { '50256': 101 } }),
      'logit_bias.50256',
      'invalid_value',
    ],
    [
      'a logit_bias value of -101',
      withFields({ logit_bias: { '7': -101 } }),
      'logit_bias.7',
      'invalid_value',
    ],
    [
      'a logit_bias key that is no token id',
      withFields({ logit_bias: { abc: 1 } }),
      'logit_bias.abc',
      'invalid_value',
    ],
    ['a non-boolean logprobs', withFields({ logprobs: 'yes' }), 'logprobs', 'invalid_value'],
    ['top_logprobs 21', withFields({ logprobs: true, top_logprobs: 21 }), 'top_logprobs', 'invalid_value'],
    ['top_logprobs without logprobs', withFields({ top_logprobs: 2 }), 'top_logprobs', 'invalid_value'],
    [
      'top_logprobs with logprobs false',
      withFields({ logprobs: false, top_logprobs: 2 }),
      'top_logprobs',
      'invalid_value',
    ],
    // metadata
    ['17 metadata pairs', withFields({ metadata: metadataOf(17) }), 'metadata', 'invalid_value'],
    [
      'a 65-character metadata key',
      withFields({ metadata: { ['k'.repeat(65)]: 'v' } }),
      'metadata',
      'invalid_value',
    ],
    [
      'a 513-character metadata value',
      withFields({ metadata: { tag: 'v'.repeat(513) } }),
      'metadata.tag',
      'invalid_value',
    ],
    ['a non-string metadata value', withFields({ metadata: { tag: 1 } }), 'metadata.tag', 'invalid_value'],
    // messages
    ['a missing messages', { model: minimal.model }, 'messages', 'missing_field'],
    ['empty messages', withMessages(), 'messages', 'invalid_value'],
    ['10 001 messages', withFields({ messages: Array(10_001).fill(user) }), 'messages', 'invalid_value'],
    ['a message that is no object', withMessages('hi'), 'messages[0]', 'invalid_value'],
    ['role bot', withMessages({ role: 'bot', content: 'x' }), 'messages[0].role', 'invalid_value'],
    ['a missing role', withMessages(user, { content: 'x' }), 'messages[1].role', 'missing_field'],
    [
      'a user message without content',
      withMessages({ role: 'user' }),
      'messages[0].content',
      'missing_field',
    ],
    [
      'a system message with null content',
      withMessages({ role: 'system', content: null }),
      'messages[0].content',
      'invalid_value',
    ],
    [
      'a developer message with numeric content',
      withMessages({ role: 'developer', content: 5 }),
      'messages[0].content',
      'invalid_value',
    ],
    [
      'an empty content part array',
      withMessages({ role: 'user', content: [] }),
      'messages[0].content',
      'invalid_value',
    ],
    ['a non-string name', withMessages({ ...user, name: 3 }), 'messages[0].name', 'invalid_value'],
    [
      'a tool message without tool_call_id',
      withMessages(user, { role: 'tool', content: 'result' }),
      'messages[1].tool_call_id',
      'missing_field',
    ],
    [
      'a tool message without content',
      withMessages(user, { role: 'tool', tool_call_id: 'call_1' }),
      'messages[1].content',
      'missing_field',
    ],
    [
      'an assistant message without content or tool_calls',
      withMessages(user, { role: 'assistant', content: null }),
      'messages[1].content',
      'missing_field',
    ],
    [
      'an assistant message with empty tool_calls and no content',
      withMessages(user, { role: 'assistant', tool_calls: [] }),
      'messages[1].content',
      'missing_field',
    ],
    [
      'a tool call of type custom',
      withMessages(user, {
        role: 'assistant',
        tool_calls: [{ id: 'c', type: 'custom', function: { name: 'f', arguments: '' } }],
      }),
      'messages[1].tool_calls[0].type',
      'invalid_value',
    ],
    [
      'a tool call without type',
      withMessages(user, {
        role: 'assistant',
        tool_calls: [{ id: 'c', function: { name: 'f', arguments: '{}' } }],
      }),
      'messages[1].tool_calls[0].type',
      'missing_field',
    ],
    [
      'a tool call without id',
      withMessages(user, {
        role: 'assistant',
        tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{}' } }],
      }),
      'messages[1].tool_calls[0].id',
      'missing_field',
    ],
    [
      'tool call arguments that are no string',
      withMessages(user, {
        role: 'assistant',
        tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: { q: 1 } } }],
      }),
      'messages[1].tool_calls[0].function.arguments',
      'invalid_value',
    ],
    [
      'a refusal that is no string',
      withMessages(user, { role: 'assistant', content: 'x', refusal: 1 }),
      'messages[1].refusal',
      'invalid_value',
    ],
    [
      'a reasoning detail without type',
      withMessages(user, { role: 'assistant', content: 'x', reasoning_details: [{ text: 't' }] }),
      'messages[1].reasoning_details[0].type',
      'missing_field',
    ],
    [
      'a reasoning detail with a string index',
      withMessages(user, { role: 'assistant', content: 'x', reasoning_details: [{ type: 't', index: '0' }] }),
      'messages[1].reasoning_details[0].index',
      'invalid_value',
    ],
    // content parts
    [
      'a text part without text',
      withMessages({ role: 'user', content: [{ type: 'text', text: 'ok' }, { type: 'text' }] }),
      'messages[0].content[1].text',
      'missing_field',
    ],
    [
      'an image part without url',
      withMessages({ role: 'user', content: [{ type: 'image_url', image_url: {} }] }),
      'messages[0].content[0].image_url.url',
      'missing_field',
    ],
    [
      'an image part with a numeric detail',
      withMessages({ role: 'user', content: [{ type: 'image_url', image_url: { url: 'u', detail: 1 } }] }),
      'messages[0].content[0].image_url.detail',
      'invalid_value',
    ],
    [
      'a file part without file_id and file_data',
      withMessages({ role: 'user', content: [{ type: 'file', file: { filename: 'a.pdf' } }] }),
      'messages[0].content[0].file',
      'missing_field',
    ],
    [
      'an audio part without data',
      withMessages({ role: 'user', content: [{ type: 'input_audio', input_audio: { format: 'wav' } }] }),
      'messages[0].content[0].input_audio.data',
      'missing_field',
    ],
    [
      'an audio part with a numeric format',
      withMessages({
        role: 'user',
        content: [{ type: 'input_audio', input_audio: { data: 'AA', format: 1 } }],
      }),
      'messages[0].content[0].input_audio.format',
      'invalid_value',
    ],
    [
      'a refusal part without refusal',
      withMessages(user, { role: 'assistant', content: [{ type: 'refusal' }] }),
      'messages[1].content[0].refusal',
      'missing_field',
    ],
    [
      'a content part without type',
      withMessages({ role: 'user', content: [{ text: 'hi' }] }),
      'messages[0].content[0].type',
      'missing_field',
    ],
    [
      'a content part that is a string',
      withMessages({ role: 'user', content: ['hi'] }),
      'messages[0].content[0]',
      'invalid_value',
    ],
    // tools and tool_choice
    [
      'a function tool name with a space',
      withFields({ tools: [{ type: 'function', function: { name: 'look up' } }] }),
      'tools[0].function.name',
      'invalid_value',
    ],
    [
      'a 65-character function tool name',
      withFields({ tools: [{ type: 'function', function: { name: 'f'.repeat(65) } }] }),
      'tools[0].function.name',
      'invalid_value',
    ],
    [
      'a function tool without name',
      withFields({ tools: [{ type: 'function', function: {} }] }),
      'tools[0].function.name',
      'missing_field',
    ],
    [
      'function parameters that are an array',
      withFields({ tools: [{ type: 'function', function: { name: 'f', parameters: [] } }] }),
      'tools[0].function.parameters',
      'invalid_value',
    ],
    [
      'a custom tool without name',
      withFields({ tools: [{ type: 'custom', custom: {} }] }),
      'tools[0].custom.name',
      'missing_field',
    ],
    [
      'a tool without type',
      withFields({ tools: [{ function: { name: 'f' } }] }),
      'tools[0].type',
      'missing_field',
    ],
    [
      'an unknown tool type',
      withFields({ tools: [{ type: 'web', web: {} }] }),
      'tools[0].type',
      'invalid_value',
    ],
    ['tool_choice sometimes', withFields({ tool_choice: 'sometimes' }), 'tool_choice', 'invalid_value'],
    ['a numeric tool_choice', withFields({ tool_choice: 1 }), 'tool_choice', 'invalid_value'],
    [
      'a tool_choice of unknown type',
      withFields({ tool_choice: { type: 'any' } }),
      'tool_choice.type',
      'invalid_value',
    ],
    [
      'a named tool_choice without name',
      withFields({ tool_choice: { type: 'function', function: {} } }),
      'tool_choice.function.name',
      'missing_field',
    ],
    [
      'an allowed_tools mode none',
      withFields({ tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'none', tools: [] } } }),
      'tool_choice.allowed_tools.mode',
      'invalid_value',
    ],
    [
      'an allowed_tools without mode',
      withFields({ tool_choice: { type: 'allowed_tools', allowed_tools: { tools: [] } } }),
      'tool_choice.allowed_tools.mode',
      'missing_field',
    ],
    [
      'allowed_tools tools that are strings',
      withFields({ tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: ['f'] } } }),
      'tool_choice.allowed_tools.tools[0]',
      'invalid_value',
    ],
    [
      'a non-boolean parallel_tool_calls',
      withFields({ parallel_tool_calls: 1 }),
      'parallel_tool_calls',
      'invalid_value',
    ],
    // effort, verbosity, web search
    ['reasoning_effort max', withFields({ reasoning_effort: 'max' }), 'reasoning_effort', 'invalid_value'],
    ['verbosity loud', withFields({ verbosity: 'loud' }), 'verbosity', 'invalid_value'],
    [
      'search_context_size huge',
      withFields({ web_search_options: { search_context_size: 'huge' } }),
      'web_search_options.search_context_size',
      'invalid_value',
    ],
    [
      'a three-letter country',
      withFields({
        web_search_options: { user_location: { type: 'approximate', approximate: { country: 'USA' } } },
      }),
      'web_search_options.user_location.approximate.country',
      'invalid_value',
    ],
    [
      'a time zone that is no IANA name',
      withFields({
        web_search_options: {
          user_location: { type: 'approximate', approximate: { timezone: 'Mars/Olympus' } },
        },
      }),
      'web_search_options.user_location.approximate.timezone',
      'invalid_value',
    ],
    [
      'a user_location without type',
      withFields({ web_search_options: { user_location: { approximate: {} } } }),
      'web_search_options.user_location.type',
      'missing_field',
    ],
    [
      'a user_location of type exact',
      withFields({ web_search_options: { user_location: { type: 'exact', approximate: {} } } }),
      'web_search_options.user_location.type',
      'invalid_value',
    ],
    // response_format
    [
      'a 65-character json_schema name',
      withFields({ response_format: { type: 'json_schema', json_schema: { name: 'n'.repeat(65) } } }),
      'response_format.json_schema.name',
      'invalid_value',
    ],
    [
      'a json_schema without name',
      withFields({ response_format: { type: 'json_schema', json_schema: { schema: {} } } }),
      'response_format.json_schema.name',
      'missing_field',
    ],
    [
      'a json_schema schema that is a string',
      withFields({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: '{}' } } }),
      'response_format.json_schema.schema',
      'invalid_value',
    ],
    [
      'a non-boolean json_schema strict',
      withFields({ response_format: { type: 'json_schema', json_schema: { name: 'x', strict: 'yes' } } }),
      'response_format.json_schema.strict',
      'invalid_value',
    ],
    [
      'a response_format without type',
      withFields({ response_format: {} }),
      'response_format.type',
      'missing_field',
    ],
    [
      'response_format xml',
      withFields({ response_format: { type: 'xml' } }),
      'response_format.type',
      'invalid_value',
    ],
    // streaming
    ['a non-boolean stream', withFields({ stream: 'true' }), 'stream', 'invalid_value'],
    [
      'stream_options without stream',
      withFields({ stream_options: { include_usage: true } }),
      'stream_options',
      'invalid_value',
    ],
    [
      'stream_options with stream false',
      withFields({ stream: false, stream_options: { include_usage: true } }),
      'stream_options',
      'invalid_value',
    ],
    [
      'a non-boolean include_usage',
      withFields({ stream: true, stream_options: { include_usage: 'yes' } }),
      'stream_options.include_usage',
      'invalid_value',
    ],
    // reasoning
    [
      'reasoning without enabled',
      withFields({ reasoning: { effort: 'low' } }),
      'reasoning.enabled',
      'missing_field',
    ],
    [
      'reasoning effort max',
      withFields({ reasoning: { enabled: true, effort: 'max' } }),
      'reasoning.effort',
      'invalid_value',
    ],
    [
      'reasoning max_tokens 1.5',
      withFields({ reasoning: { enabled: true, max_tokens: 1.5 } }),
      'reasoning.max_tokens',
      'invalid_value',
    ],
    [
      'a non-boolean reasoning exclude',
      withFields({ reasoning: { enabled: true, exclude: 'yes' } }),
      'reasoning.exclude',
      'invalid_value',
    ],
    [
      'reasoning usage without include',
      withFields({ reasoning: { enabled: true, usage: {} } }),
      'reasoning.usage.include',
      'missing_field',
    ],
    // provider
    [
      'provider without routing',
      withFields({ provider: { fallback: 'groq' } }),
      'provider.routing',
      'missing_field',
    ],
    [
      'a bad provider.routing.type',
      withFields({ provider: { routing: { type: 'random', providers: ['openai'] } } }),
      'provider.routing.type',
      'invalid_value',
    ],
    [
      'provider.routing without type',
      withFields({ provider: { routing: { providers: ['openai'] } } }),
      'provider.routing.type',
      'missing_field',
    ],
    [
      'a bad provider.routing.primary_factor',
      withFields({ provider: { routing: { type: 'priority', primary_factor: 'vibes', providers: [] } } }),
      'provider.routing.primary_factor',
      'invalid_value',
    ],
    [
      'provider.routing without providers',
      withFields({ provider: { routing: { type: 'priority' } } }),
      'provider.routing.providers',
      'missing_field',
    ],
    [
      'a non-string provider.fallback',
      withFields({ provider: { routing: { type: 'priority', providers: [] }, fallback: 1 } }),
      'provider.fallback',
      'invalid_value',
    ],
    // model_routing_config
    [
      'model_routing_config without available_models',
      withFields({ model_routing_config: { preference: 'cheap' } }),
      'model_routing_config.available_models',
      'missing_field',
    ],
    [
      'a bad task_info.task_type',
      withFields({ model_routing_config: { available_models: [], task_info: { task_type: 'image' } } }),
      'model_routing_config.task_info.task_type',
      'invalid_value',
    ],
    [
      'a bad task_info.complexity',
      withFields({ model_routing_config: { available_models: [], task_info: { complexity: 'extreme' } } }),
      'model_routing_config.task_info.complexity',
      'invalid_value',
    ],
  ])('rejects %s', (_, body, param, code) => {
    const e = rejection(body)
    expect(e.status).toBe(400)
    expect(e.type).toBe('invalid_request_error')
    expect(e.param).toBe(param)
    expect(e.code).toBe(code)
  })
})

describe('isKnownContentPart', () => {
  it('tells the kinds the schema checks from the ones it passes unchecked', () => {
    const parsed = parseChatRequest(
      withMessages({
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'image_url', image_url: { url: 'https://x/a.png' } },
          { type: 'file', file: { file_id: 'file-1' } },
          { type: 'input_audio', input_audio: { data: 'AA', format: 'wav' } },
          { type: 'refusal', refusal: 'no' },
          { type: 'video_url', video_url: { url: 'https://x/v.mp4' } },
        ],
      }),
    )
    const content = parsed.messages[0]!.content
    if (!Array.isArray(content)) throw new Error('expected parts')
    expect(content.map(isKnownContentPart)).toEqual([true, true, true, true, true, false])
  })
})

describe('parseChatRequest: size limits', () => {
  const L = CHAT_LIMITS
  const call = (i: number) => ({ id: `c${i}`, type: 'function', function: { name: 'f', arguments: '{}' } })
  const tool = (i: number) => ({ type: 'function', function: { name: `f${i}` } })
  const calls = (n: number) => ({
    role: 'assistant',
    tool_calls: Array.from({ length: n }, (_, i) => call(i)),
  })
  const parts = (n: number) => ({ role: 'user', content: Array(n).fill({ type: 'text', text: 'a' }) })
  const details = (n: number) => ({
    role: 'assistant',
    content: 'a',
    reasoning_details: Array(n).fill({ type: 't' }),
  })
  const ids = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [String(i), 1]))
  const allowed = (n: number) => ({
    type: 'allowed_tools',
    allowed_tools: { mode: 'auto', tools: Array(n).fill({ type: 'function', function: { name: 'f0' } }) },
  })
  const routing = (n: number) => ({ routing: { type: 'priority', providers: Array(n).fill('openai') } })
  const available = (n: number) => ({ available_models: Array(n).fill('openai/gpt-4o') })

  // Each: the largest accepted request, and one item more (the param the 400 names).
  it.each<[string, (n: number) => Record<string, unknown>, number, string]>([
    ['messages', (n) => withMessages(...Array(n).fill(user)), L.messages, 'messages'],
    ['content parts in one message', (n) => withMessages(parts(n)), L.contentParts, 'messages[0].content'],
    [
      'content parts across messages',
      (n) => withMessages(parts(n - 1), user, parts(1)),
      L.contentParts,
      'messages[2].content',
    ],
    ['tool calls', (n) => withMessages(user, calls(n)), L.toolCalls, 'messages[1].tool_calls'],
    [
      'tool calls across messages',
      (n) => withMessages(user, calls(n - 2), calls(2)),
      L.toolCalls,
      'messages[2].tool_calls',
    ],
    [
      'reasoning_details',
      (n) => withMessages(user, details(n)),
      L.reasoningDetails,
      'messages[1].reasoning_details',
    ],
    ['tools', (n) => withFields({ tools: Array.from({ length: n }, (_, i) => tool(i)) }), L.tools, 'tools'],
    [
      'allowed tools',
      (n) => withFields({ tools: [tool(0)], tool_choice: allowed(n) }),
      L.allowedTools,
      'tool_choice.allowed_tools.tools',
    ],
    ['logit_bias token ids', (n) => withFields({ logit_bias: ids(n) }), L.logitBias, 'logit_bias'],
    ['stop strings', (n) => withFields({ stop: Array(n).fill('x') }), L.stop, 'stop'],
    [
      'routing providers',
      (n) => withFields({ provider: routing(n) }),
      L.routingModels,
      'provider.routing.providers',
    ],
    [
      'available models',
      (n) => withFields({ model_routing_config: available(n) }),
      L.routingModels,
      'model_routing_config.available_models',
    ],
  ])('%s: takes the limit, refuses one more naming the field', (_, body, limit, param) => {
    expect(() => parseChatRequest(body(limit))).not.toThrow()
    const e = rejection(body(limit + 1))
    expect(e).toMatchObject({ status: 400, code: 'invalid_value', param })
    expect(e.message).toContain(String(limit))
  })

  it('refuses by length before checking a single item', () => {
    // Items of no valid shape: a schema that looked at them first would report messages[0].
    const e = rejection(withFields({ messages: Array(L.messages + 1).fill(42) }))
    expect(e.param).toBe('messages')
    expect(rejection(withFields({ tools: Array(L.tools + 1).fill(null) })).param).toBe('tools')
  })
})

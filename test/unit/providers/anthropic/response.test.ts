import { describe, expect, it } from 'vitest'
import { fromAnthropicError, fromAnthropicStreamError } from '../../../../src/providers/anthropic/errors.ts'
import { fromAnthropicMessage, mapStopReason, toUsage } from '../../../../src/providers/anthropic/response.ts'
import { anthropicMessageSchema } from '../../../../src/providers/anthropic/wire.ts'
import { readFixture, readJsonFixture } from '../../../support/fixtures.ts'

const meta = { id: '', model: 'claude-sonnet-4-5', created: 1_700_000_000 }
const message = (name: string) => anthropicMessageSchema.parse(readJsonFixture(`anthropic/${name}`))
const errorBody = (name: string) => readFixture(`anthropic/${name}`)

describe('fromAnthropicMessage', () => {
  it('translates the documented text answer', () => {
    expect(fromAnthropicMessage(message('message.json'), meta)).toEqual({
      id: 'msg_013Zva2CMHLNnXjNJJKqJ2EF',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'claude-sonnet-4-5',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Hi! My name is Claude.', refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: {
        prompt_tokens: 2095,
        completion_tokens: 503,
        total_tokens: 2598,
        prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
      },
    })
  })

  it('translates thinking with its signature, text, parallel tool calls and cache usage', () => {
    const c = fromAnthropicMessage(message('thinking-parallel-tools.json'), meta)
    const choice = c.choices[0]!
    expect(choice.finish_reason).toBe('tool_calls')
    expect(choice.message).toEqual({
      role: 'assistant',
      content: "I'll check both cities.",
      refusal: null,
      reasoning: 'The user wants weather in two cities; I can call the tool for both at once.',
      reasoning_details: [
        {
          type: 'reasoning.text',
          text: 'The user wants weather in two cities; I can call the tool for both at once.',
          signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
          format: 'anthropic-claude-v1',
          index: 0,
        },
      ],
      tool_calls: [
        {
          id: 'toolu_01A09q90qw90lq917835lq9',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Paris, France"}' },
        },
        {
          id: 'toolu_01B81k2j3k4j5k6j7k8j9k0',
          type: 'function',
          function: { name: 'get_weather', arguments: '{"location":"Tokyo, Japan"}' },
        },
      ],
    })
    // input 12 + cache read 1024 + cache write 2051; thinking is inside output_tokens.
    expect(c.usage).toEqual({
      prompt_tokens: 3087,
      completion_tokens: 146,
      total_tokens: 3233,
      prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 2051 },
      // Not reported by this recording: estimated from the thinking text, and marked so.
      completion_tokens_details: { reasoning_tokens: 19, reasoning_tokens_estimated: true },
    })
  })

  it('keeps redacted thinking as an encrypted detail, in block order', () => {
    const m = fromAnthropicMessage(message('redacted-thinking.json'), meta).choices[0]!.message
    expect(m.reasoning_details).toEqual([
      expect.objectContaining({
        type: 'reasoning.text',
        index: 0,
        signature: 'WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve',
      }),
      {
        type: 'reasoning.encrypted',
        data: expect.stringMatching(/^EmwKAhgB/),
        format: 'anthropic-claude-v1',
        index: 1,
      },
    ])
    expect(m.content).toBe('Based on my analysis...')
  })

  it('removes reasoning text with exclude, keeping the opaque redacted block and the token count', () => {
    const c = fromAnthropicMessage(message('redacted-thinking.json'), meta, { excludeReasoning: true })
    const m = c.choices[0]!.message
    expect(m).not.toHaveProperty('reasoning')
    expect(m.reasoning_details).toEqual([expect.objectContaining({ type: 'reasoning.encrypted', index: 0 })])
    expect(c.usage?.completion_tokens).toBe(400)
  })

  it('maps max_tokens to length and refusal to content_filter', () => {
    expect(fromAnthropicMessage(message('max-tokens.json'), meta).choices[0]!.finish_reason).toBe('length')
    const refused = fromAnthropicMessage(message('refusal.json'), meta).choices[0]!
    expect(refused.finish_reason).toBe('content_filter')
    // Without stop_details: OpenAI's refusal shape with a generic reason.
    expect(refused.message.content).toBeNull()
    expect(refused.message.refusal).toBe('The model declined to answer.')
  })

  it('puts a refusal’s explanation in message.refusal', () => {
    const refused = fromAnthropicMessage(message('refusal-details.json'), meta).choices[0]!
    expect(refused.finish_reason).toBe('content_filter')
    expect(refused.message).toMatchObject({
      content: null,
      refusal: "This request asks for working malware, which I can't help with.",
    })
  })

  it('reports the thinking tokens Anthropic counted, not an estimate', () => {
    const c = fromAnthropicMessage(message('thinking-tokens.json'), meta)
    expect(c.usage?.completion_tokens_details).toEqual({ reasoning_tokens: 139 })
    expect(c.choices[0]!.message.content).toBe('7')
  })
})

describe('mapStopReason', () => {
  it.each([
    ['end_turn', 'stop'],
    ['stop_sequence', 'stop'],
    ['pause_turn', 'stop'],
    ['max_tokens', 'length'],
    ['model_context_window_exceeded', 'length'],
    ['tool_use', 'tool_calls'],
    ['refusal', 'content_filter'],
    ['some_future_reason', 'stop'],
  ])('%s → %s', (reason, expected) => {
    expect(mapStopReason(reason)).toBe(expected)
  })
})

describe('toUsage', () => {
  it('sums the iterations of a compacted answer (the top level is the last iteration only)', () => {
    const c = fromAnthropicMessage(message('compaction.json'), meta)
    expect(c.usage).toEqual({
      prompt_tokens: 61_067,
      completion_tokens: 1912,
      total_tokens: 62_979,
      prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
    })
    expect(c.choices[0]!.message.content).toContain('Lyon')
  })

  it('sums cache reads, writes and thinking over iterations, never below the top level', () => {
    const u = toUsage({
      input_tokens: 10,
      output_tokens: 50,
      cache_read_input_tokens: 7,
      iterations: [
        { type: 'compaction', input_tokens: 100, output_tokens: 20, cache_creation_input_tokens: 30 },
        {
          type: 'message',
          input_tokens: 10,
          output_tokens: 50,
          cache_read_input_tokens: 7,
          output_tokens_details: { thinking_tokens: 12 },
        },
      ],
    })
    expect(u).toMatchObject({
      prompt_tokens: 110 + 30 + 7,
      completion_tokens: 70,
      prompt_tokens_details: { cached_tokens: 7, cache_write_tokens: 30 },
      completion_tokens_details: { reasoning_tokens: 12 },
    })
    // Iterations that report less than the top level (none the API sends) never lower the bill.
    expect(toUsage({ input_tokens: 40, output_tokens: 9, iterations: [{ input_tokens: 1 }] })).toMatchObject({
      prompt_tokens: 40,
      completion_tokens: 9,
    })
  })

  it('caps the reasoning estimate at the output tokens', () => {
    expect(toUsage({ input_tokens: 1, output_tokens: 5 }, 50).completion_tokens_details).toEqual({
      reasoning_tokens: 5,
      reasoning_tokens_estimated: true,
    })
    expect(
      toUsage({ input_tokens: 1, output_tokens: 5, output_tokens_details: { thinking_tokens: 3 } }, 50)
        .completion_tokens_details,
    ).toEqual({ reasoning_tokens: 3 })
  })
})

describe('fromAnthropicError', () => {
  const secret = 'sk-ant-api03-fake-key-for-tests-000000'

  it('maps 529 overloaded_error to a retryable 502', () => {
    const e = fromAnthropicError('anthropic', 529, errorBody('overloaded-529.json'), undefined)
    expect(e).toMatchObject({ status: 502, type: 'upstream_error', code: 'upstream_error', retryable: true })
    expect(e.message).toMatch(/overloaded/)
  })

  it('maps 429 to rate_limit_exceeded and passes retry-after on', () => {
    const e = fromAnthropicError('anthropic', 429, errorBody('rate-limit-429.json'), '17')
    expect(e).toMatchObject({ status: 429, code: 'rate_limit_exceeded', headers: { 'retry-after': '17' } })
    expect(fromAnthropicError('anthropic', 429, '', 'soon').headers).toEqual({
      'x-ratelimit-scope': 'upstream',
    })
  })

  it("returns the provider's message for a 400 the request caused, secrets removed", () => {
    const e = fromAnthropicError('anthropic', 400, errorBody('invalid-request-400.json'), undefined)
    expect(e).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(e.message).toContain("String should match pattern '^[a-zA-Z0-9_-]+$'")
    const leaky = JSON.stringify({
      type: 'error',
      error: { type: 'invalid_request_error', message: `bad key ${secret}` },
    })
    expect(fromAnthropicError('anthropic', 400, leaky, undefined, [secret]).message).not.toContain(secret)
  })

  it("maps a refused key to 502 without the provider's message, and 500 to 502", () => {
    const e = fromAnthropicError('anthropic', 401, errorBody('authentication-401.json'), undefined)
    expect(e).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(e.message).not.toContain('x-api-key')
    expect(fromAnthropicError('anthropic', 500, 'not json', undefined)).toMatchObject({
      status: 502,
      retryable: true,
    })
  })

  it('maps an error event mid-stream to a retryable 502', () => {
    const e = fromAnthropicStreamError('anthropic', {
      type: 'error',
      error: { type: 'overloaded_error', message: 'Overloaded' },
    })
    expect(e).toMatchObject({ status: 502, code: 'upstream_error', retryable: true })
    expect(e.message).toBe('upstream anthropic is overloaded')
  })
})

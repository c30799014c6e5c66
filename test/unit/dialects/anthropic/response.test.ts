import { describe, expect, it } from 'vitest'
import { toAnthropicErrorBody } from '../../../../src/dialects/anthropic/errors.ts'
import { stopOf, toAnthropicMessage, toStop } from '../../../../src/dialects/anthropic/response.ts'
import { GatewayError } from '../../../../src/errors.ts'
import { fromAnthropicMessage } from '../../../../src/providers/anthropic/response.ts'
import { anthropicMessageSchema } from '../../../../src/providers/anthropic/wire.ts'
import { readJsonFixture } from '../../../support/fixtures.ts'

const meta = { id: '', model: 'claude-sonnet-4-5', created: 0 }

/** An Anthropic upstream's message → chat completion (the provider adapter) → Anthropic message (the dialect). */
function roundTrip(name: string) {
  const upstream = anthropicMessageSchema.parse(readJsonFixture(`anthropic/${name}`))
  return { upstream, out: toAnthropicMessage(fromAnthropicMessage(upstream, meta)) }
}

describe('chat completion → Anthropic message', () => {
  it('gives back thinking with its signature, text and tool calls of an Anthropic answer', () => {
    const { upstream, out } = roundTrip('thinking-parallel-tools.json')
    expect(out.content).toEqual(upstream.content)
    expect(out.stop_reason).toBe(upstream.stop_reason)
    expect(out).toMatchObject({ type: 'message', role: 'assistant', stop_sequence: null })
  })

  it('gives back redacted thinking, and the usage with cache reads and writes apart', () => {
    const { upstream, out } = roundTrip('redacted-thinking.json')
    expect(out.content).toEqual(upstream.content)
    const usage = roundTrip('message.json')
    expect(usage.out.usage.input_tokens).toBe(usage.upstream.usage.input_tokens)
    expect(usage.out.usage.output_tokens).toBe(usage.upstream.usage.output_tokens)
  })

  it('maps the output limit to max_tokens', () => {
    expect(roundTrip('max-tokens.json').out.stop_reason).toBe('max_tokens')
  })

  it('answers a completion with reasoning text but no signature as a thinking block without one', () => {
    const out = toAnthropicMessage({
      id: 'gen-1',
      object: 'chat.completion',
      created: 0,
      model: 'openai/o',
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Hi', reasoning: 'hmm' },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: {
        prompt_tokens: 12,
        completion_tokens: 3,
        total_tokens: 15,
        prompt_tokens_details: { cached_tokens: 2, cache_write_tokens: 4 },
      },
    })
    expect(out.content).toEqual([
      { type: 'thinking', thinking: 'hmm', signature: '' },
      { type: 'text', text: 'Hi' },
    ])
    expect(out.usage).toEqual({
      input_tokens: 6,
      output_tokens: 3,
      cache_read_input_tokens: 2,
      cache_creation_input_tokens: 4,
    })
  })
})

describe('errors in Anthropic shape', () => {
  it('maps each status to its Anthropic error type and keeps the request id', () => {
    const cases: [GatewayError, string][] = [
      [new GatewayError('invalid_value', 'bad'), 'invalid_request_error'],
      [new GatewayError('invalid_api_key', 'bad key'), 'authentication_error'],
      [new GatewayError('insufficient_credits', 'pay'), 'billing_error'],
      [new GatewayError('url_expired', 'no'), 'permission_error'],
      [new GatewayError('model_not_found', 'no'), 'not_found_error'],
      [new GatewayError('rate_limit_exceeded', 'slow'), 'rate_limit_error'],
      [new GatewayError('no_available_provider', 'busy'), 'overloaded_error'],
      [new GatewayError('upstream_error', 'x'), 'api_error'],
    ]
    for (const [e, type] of cases) {
      expect(toAnthropicErrorBody(e, 'req-1')).toEqual({
        type: 'error',
        error: { type, message: e.message },
        request_id: 'req-1',
      })
    }
  })
})

describe('the stop sequence that ended an answer', () => {
  const stops = ['END', '###']
  it('is the choice stop_reason when it is one of the client sequences and the finish is stop', () => {
    expect(stopOf({ finish_reason: 'stop', stop_reason: 'END' }, stops)).toBe('END')
    expect(stopOf({ finish_reason: 'stop', stop_reason: '</s>' }, stops)).toBeNull()
    expect(stopOf({ finish_reason: 'stop', stop_reason: 2 }, stops)).toBeNull()
    expect(stopOf({ finish_reason: 'length', stop_reason: 'END' }, stops)).toBeNull()
    expect(stopOf({ finish_reason: 'stop' }, stops)).toBeNull()
    expect(stopOf({ finish_reason: 'stop', stop_reason: 'END' }, undefined)).toBeNull()
  })
  it('makes the stop reason stop_sequence; without one the finish reason decides', () => {
    expect(toStop('stop', 'END')).toEqual({ stop_reason: 'stop_sequence', stop_sequence: 'END' })
    expect(toStop('stop', null)).toEqual({ stop_reason: 'end_turn', stop_sequence: null })
    expect(toStop('length', null)).toEqual({ stop_reason: 'max_tokens', stop_sequence: null })
    expect(toStop(null, null)).toEqual({ stop_reason: 'end_turn', stop_sequence: null })
  })
})

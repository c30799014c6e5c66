import { describe, expect, it } from 'vitest'
import { fromGeminiError, fromGeminiStreamError } from '../../../../src/providers/gemini/errors.ts'
import {
  fromGeminiEmbeddings,
  fromGeminiResponse,
  mapFinishReason,
  toUsage,
} from '../../../../src/providers/gemini/response.ts'
import { geminiEmbedResponseSchema, geminiResponseSchema } from '../../../../src/providers/gemini/wire.ts'
import { readFixture, readJsonFixture } from '../../../support/fixtures.ts'

const meta = { id: '', model: 'gemini-2.5-flash', created: 1_700_000_000 }
const response = (name: string) => geminiResponseSchema.parse(readJsonFixture(`gemini/${name}`))

describe('fromGeminiResponse', () => {
  it('translates a text answer, keeping its thought signature as an encrypted detail', () => {
    expect(fromGeminiResponse(response('completion.json'), meta)).toEqual({
      id: 'R3sp0nse1d',
      object: 'chat.completion',
      created: 1_700_000_000,
      model: 'gemini-3-flash-preview',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: '1+1 equals 2.',
            refusal: null,
            reasoning_details: [
              {
                type: 'reasoning.encrypted',
                data: 'EjQKMgEMOdbHq1bXtXV5',
                format: 'google-gemini-v1',
                index: 0,
              },
            ],
          },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: {
        prompt_tokens: 15,
        completion_tokens: 6,
        total_tokens: 21,
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
      },
    })
  })

  it('gives parallel function calls deterministic ids, the signature tied to the first, and finish tool_calls', () => {
    const c = fromGeminiResponse(response('parallel-function-calls.json'), meta)
    const m = c.choices[0]!.message
    expect(c.choices[0]!.finish_reason).toBe('tool_calls')
    expect(m.content).toBeNull()
    expect(m.tool_calls).toEqual([
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
    expect(m.reasoning_details).toEqual([
      {
        type: 'reasoning.encrypted',
        data: 'CiQBVKhc7oDnVvJ4Zq5yVqwnHGdOpd0Xq4xX',
        id: 'call_0_get_weather',
        format: 'google-gemini-v1',
        index: 0,
      },
    ])
    // Thoughts are completion tokens; cached tokens are part of the prompt.
    expect(c.usage).toEqual({
      prompt_tokens: 120,
      completion_tokens: 96,
      total_tokens: 216,
      prompt_tokens_details: { cached_tokens: 96 },
      completion_tokens_details: { reasoning_tokens: 64 },
    })
  })

  it('uses the id Gemini gives a function call when it gives one', () => {
    const c = fromGeminiResponse(
      {
        candidates: [
          {
            content: { parts: [{ functionCall: { name: 'f', args: {}, id: 'fc-77' } }] },
            finishReason: 'STOP',
          },
        ],
      },
      meta,
    )
    expect(c.choices[0]!.message.tool_calls?.[0]?.id).toBe('fc-77')
  })

  it('turns thought summaries into reasoning and one reasoning.text detail', () => {
    const m = fromGeminiResponse(response('thinking.json'), meta).choices[0]!.message
    expect(m.reasoning).toBe('**Analyzing the request**\n\nThe user asks for the GCD of 1071 and 462.')
    expect(m.content).toBe('The GCD of 1071 and 462 is 21.')
    expect(m.reasoning_details).toEqual([
      { type: 'reasoning.text', text: m.reasoning, format: 'google-gemini-v1', index: 0 },
      { type: 'reasoning.encrypted', data: 'Eq0DCqoDAVSoXO7G2zk4n0sJ', format: 'google-gemini-v1', index: 1 },
    ])
    const excluded = fromGeminiResponse(response('thinking.json'), meta, { excludeReasoning: true })
    expect(excluded.choices[0]!.message).not.toHaveProperty('reasoning')
    expect(excluded.choices[0]!.message.reasoning_details).toEqual([
      expect.objectContaining({ type: 'reasoning.encrypted' }),
    ])
    expect(excluded.usage?.completion_tokens_details?.reasoning_tokens).toBe(270)
  })

  it('maps safety blocks, blocked prompts and MAX_TOKENS', () => {
    const safety = fromGeminiResponse(response('safety.json'), meta).choices[0]!
    expect(safety).toMatchObject({ finish_reason: 'content_filter', message: { content: '' } })
    const blocked = fromGeminiResponse(response('prompt-blocked.json'), meta)
    expect(blocked.choices[0]).toMatchObject({ finish_reason: 'content_filter', message: { content: '' } })
    expect(blocked.usage?.prompt_tokens).toBe(12)
    expect(fromGeminiResponse(response('max-tokens.json'), meta).choices[0]!.finish_reason).toBe('length')
  })
})

describe('mapFinishReason', () => {
  it.each([
    ['STOP', false, 'stop'],
    ['STOP', true, 'tool_calls'],
    ['MAX_TOKENS', true, 'length'],
    ['SAFETY', false, 'content_filter'],
    ['RECITATION', false, 'content_filter'],
    ['BLOCKLIST', false, 'content_filter'],
    ['PROHIBITED_CONTENT', false, 'content_filter'],
    ['SPII', false, 'content_filter'],
    ['MALFORMED_FUNCTION_CALL', false, 'stop'],
    ['OTHER', false, 'stop'],
  ] as const)('%s (tool calls: %s) → %s', (reason, calls, expected) => {
    expect(mapFinishReason(reason, calls)).toBe(expected)
  })
})

describe('toUsage', () => {
  it('counts tool-use prompt tokens as prompt and survives missing fields', () => {
    expect(
      toUsage({ promptTokenCount: 10, toolUsePromptTokenCount: 5, candidatesTokenCount: 2 }),
    ).toMatchObject({
      prompt_tokens: 15,
      completion_tokens: 2,
      total_tokens: 17,
    })
    expect(toUsage(undefined)).toMatchObject({ prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 })
  })
})

describe('fromGeminiEmbeddings', () => {
  const resp = geminiEmbedResponseSchema.parse(readJsonFixture('gemini/batch-embed.json'))

  it('returns OpenAI embedding objects with an estimated usage', () => {
    const out = fromGeminiEmbeddings(
      resp,
      { model: 'google/gemini-embedding-001', input: ['abcd', 'abcdefgh'] },
      'google/gemini-embedding-001',
    )
    expect(out).toEqual({
      object: 'list',
      data: [
        { object: 'embedding', index: 0, embedding: [0.0123, -0.0456, 0.0789, 0.0012] },
        { object: 'embedding', index: 1, embedding: [-0.0321, 0.0654, -0.0987, 0.0021] },
      ],
      model: 'google/gemini-embedding-001',
      usage: { prompt_tokens: 3, total_tokens: 3 },
    })
  })

  it('encodes base64 as little-endian float32', () => {
    const out = fromGeminiEmbeddings(
      resp,
      { model: 'g/e', input: ['a', 'b'], encoding_format: 'base64' },
      'g/e',
    )
    const b64 = out.data[0]!.embedding as string
    const bytes = Buffer.from(b64, 'base64')
    const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4))
    expect(floats.map((f) => Number(f.toFixed(4)))).toEqual([0.0123, -0.0456, 0.0789, 0.0012])
  })
})

describe('fromGeminiError', () => {
  const secret = 'AIzaSyFAKE-key-for-tests-0000000000000'

  it('maps 429 RESOURCE_EXHAUSTED with the RetryInfo delay as retry-after', () => {
    const e = fromGeminiError('google', 429, readFixture('gemini/error-429.json'), undefined)
    expect(e).toMatchObject({
      status: 429,
      code: 'rate_limit_exceeded',
      headers: { 'retry-after': '28' },
      retryable: true,
    })
    expect(fromGeminiError('google', 429, '', '5').headers).toEqual({
      'retry-after': '5',
      'x-ratelimit-scope': 'upstream',
    })
  })

  it('treats an invalid key (400 API_KEY_INVALID) as the gateway problem it is', () => {
    const e = fromGeminiError('google', 400, readFixture('gemini/error-key-invalid.json'), undefined)
    expect(e).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(e.message).not.toMatch(/API key/)
  })

  it("returns the provider's message for a 400 the request caused, secrets removed", () => {
    const e = fromGeminiError('google', 400, readFixture('gemini/error-400.json'), undefined)
    expect(e).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(e.message).toContain('contents is not specified')
    const leaky = JSON.stringify({
      error: { code: 400, message: `bad ${secret}`, status: 'INVALID_ARGUMENT' },
    })
    expect(fromGeminiError('google', 400, leaky, undefined, [secret]).message).not.toContain(secret)
  })

  it('maps 503 UNAVAILABLE to a retryable 502, 504 to a timeout, and mid-stream errors to 502', () => {
    expect(fromGeminiError('google', 503, readFixture('gemini/error-503.json'), undefined)).toMatchObject({
      status: 502,
      retryable: true,
      message: 'upstream google is overloaded (503)',
    })
    expect(fromGeminiError('google', 504, '', undefined)).toMatchObject({
      status: 504,
      code: 'upstream_timeout',
    })
    expect(fromGeminiStreamError('google', readJsonFixture('gemini/error-503.json'))).toMatchObject({
      status: 502,
      message: 'upstream google failed mid-stream (UNAVAILABLE)',
    })
  })
})

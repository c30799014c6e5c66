import { describe, expect, it } from 'vitest'
import { errorCatalogue, GatewayError, toErrorBody, toGatewayError, UpstreamError } from '../../src/errors.ts'
import { fromAnthropicError } from '../../src/providers/anthropic/errors.ts'
import { fromGeminiError } from '../../src/providers/gemini/errors.ts'
import { fromOpenAIError } from '../../src/providers/openai-compat/errors.ts'

describe('error catalogue', () => {
  it('gives every code one status and type, taken from the catalogue', () => {
    for (const [code, entry] of Object.entries(errorCatalogue)) {
      const e = new GatewayError(code as keyof typeof errorCatalogue, 'm')
      expect([e.status, e.type]).toEqual([entry.status, entry.type])
    }
    expect(new GatewayError('insufficient_credits', 'no').status).toBe(402)
    expect(toErrorBody(new GatewayError('model_not_found', 'gone', { param: 'model' }), 'r1')).toEqual({
      error: { message: 'gone', type: 'not_found_error', code: 'model_not_found', param: 'model' },
      request_id: 'r1',
    })
  })

  it('maps Fastify router errors to the envelope codes', () => {
    expect(toGatewayError({ code: 'FST_ERR_MAX_PARAM_LENGTH', statusCode: 414 })).toMatchObject({
      status: 414,
      code: 'uri_too_long',
    })
    expect(toGatewayError({ code: 'FST_ERR_BAD_URL', statusCode: 400 })).toMatchObject({
      status: 400,
      code: 'invalid_request',
    })
  })
})

describe('upstream failures keep their facts', () => {
  it.each([
    ['openai-compat', fromOpenAIError('p1', 500, '{}', undefined), 502, 500, true],
    ['openai-compat 429', fromOpenAIError('p1', 429, '{}', '7'), 429, 429, true],
    [
      'openai-compat 400',
      fromOpenAIError('p1', 400, '{"error":{"message":"bad"}}', undefined),
      400,
      400,
      false,
    ],
    ['anthropic 529', fromAnthropicError('p2', 529, '{}', undefined), 502, 529, true],
    ['gemini 503', fromGeminiError('p3', 503, '{}', undefined), 502, 503, true],
    ['gemini 504', fromGeminiError('p3', 504, '{}', undefined), 504, 504, true],
  ])('%s', (_name, err, status, upstreamStatus, retryable) => {
    expect(err).toBeInstanceOf(UpstreamError)
    const e = err as UpstreamError
    expect([e.status, e.upstreamStatus, e.retryable]).toEqual([status, upstreamStatus, retryable])
    expect(e.provider).toMatch(/^p\d$/)
  })
})

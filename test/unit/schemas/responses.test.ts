import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { parseResponsesRequest } from '../../../src/schemas/responses.ts'

const base = { model: 'openai/gpt-4o', input: 'hi' }

function rejection(body: Record<string, unknown>): { code: string; param: string | null; message: string } {
  try {
    parseResponsesRequest(body)
  } catch (err) {
    if (err instanceof GatewayError) {
      expect(err.status).toBe(400)
      return { code: err.code, param: err.param, message: err.message }
    }
    throw err
  }
  throw new Error('accepted')
}

describe('Responses request schema', () => {
  it('accepts the fields SDKs send, the ignored ones included', () => {
    expect(() =>
      parseResponsesRequest({
        ...base,
        store: true,
        include: ['reasoning.encrypted_content'],
        truncation: 'auto',
        service_tier: 'auto',
        prompt_cache_key: 'k',
        safety_identifier: 's',
        stream_options: { include_obfuscation: false },
        previous_response_id: null,
        background: false,
        metadata: { a: 'b' },
        user: 'u',
        reasoning: { effort: 'low', summary: 'auto' },
      }),
    ).not.toThrow()
  })

  it('needs model and input', () => {
    expect(rejection({ input: 'x' })).toMatchObject({ code: 'missing_field', param: 'model' })
    expect(rejection({ model: 'openai/gpt-4o' })).toMatchObject({ code: 'missing_field', param: 'input' })
    expect(rejection({ ...base, input: [] })).toMatchObject({ code: 'invalid_value', param: 'input' })
  })

  it('names an unknown field', () => {
    expect(rejection({ ...base, frobnicate: 1 })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'frobnicate',
    })
  })

  it('refuses built-in tools by name, and built-in tool choices', () => {
    for (const type of [
      'web_search_preview',
      'file_search',
      'computer_use_preview',
      'code_interpreter',
      'mcp',
    ]) {
      const r = rejection({ ...base, tools: [{ type: 'function', name: 'f' }, { type }] })
      expect(r).toMatchObject({ code: 'unsupported_parameter', param: 'tools[1].type' })
      expect(r.message).toContain(type)
    }
    expect(rejection({ ...base, tool_choice: { type: 'file_search' } })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'tool_choice.type',
    })
  })

  it('checks previous_response_id and item references, and refuses background responses', () => {
    expect(rejection({ ...base, previous_response_id: '' })).toMatchObject({
      code: 'invalid_value',
      param: 'previous_response_id',
    })
    expect(rejection({ ...base, input: [{ type: 'item_reference' }] })).toMatchObject({
      code: 'missing_field',
      param: 'input[0].id',
    })
    expect(rejection({ ...base, background: true })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'background',
    })
  })

  it('checks input items and their parts at their path', () => {
    expect(rejection({ ...base, input: [{ role: 'robot', content: 'x' }] })).toMatchObject({
      code: 'invalid_value',
      param: 'input[0].role',
    })
    expect(rejection({ ...base, input: [{ type: 'computer_call', call_id: 'c' }] })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'input[0].type',
    })
    expect(
      rejection({ ...base, input: [{ role: 'user', content: [{ type: 'input_image', detail: 'low' }] }] }),
    ).toMatchObject({ code: 'missing_field', param: 'input[0].content[0]' })
    expect(
      rejection({ ...base, input: [{ role: 'user', content: [{ type: 'input_audio', data: 'x' }] }] }),
    ).toMatchObject({ code: 'unsupported_parameter', param: 'input[0].content[0].type' })
    expect(
      rejection({
        ...base,
        input: [{ role: 'user', content: [{ type: 'input_file', file_url: 'https://x/a.pdf' }] }],
      }),
    ).toMatchObject({ code: 'unsupported_parameter', param: 'input[0].content[0].file_url' })
    expect(
      rejection({ ...base, input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }),
    ).toMatchObject({
      code: 'missing_field',
      param: 'input[0].call_id',
    })
    expect(rejection({ ...base, input: [{ type: 'function_call_output', call_id: 'c' }] })).toMatchObject({
      code: 'missing_field',
      param: 'input[0].output',
    })
  })

  it('checks text.format, limits and sampling', () => {
    expect(rejection({ ...base, text: { format: { type: 'json_schema', name: 'x' } } })).toMatchObject({
      code: 'missing_field',
      param: 'text.format.schema',
    })
    expect(rejection({ ...base, text: { format: { type: 'yaml' } } })).toMatchObject({
      param: 'text.format.type',
    })
    expect(rejection({ ...base, max_output_tokens: 0 })).toMatchObject({ param: 'max_output_tokens' })
    expect(rejection({ ...base, temperature: 3 })).toMatchObject({ param: 'temperature' })
    expect(rejection({ ...base, top_p: -1 })).toMatchObject({ param: 'top_p' })
    expect(rejection({ ...base, reasoning: { effort: 'extreme' } })).toMatchObject({
      param: 'reasoning.effort',
    })
    expect(rejection({ ...base, metadata: { k: 'v'.repeat(600) } })).toMatchObject({ param: 'metadata.k' })
  })
})

import { describe, expect, it } from 'vitest'
import { fromEncryptedContent } from '../../../../src/dialects/responses/request.ts'
import { responseId, toResponse, type ResponseMeta } from '../../../../src/dialects/responses/response.ts'
import { parseResponsesRequest } from '../../../../src/schemas/responses.ts'
import { readJsonFixture } from '../../../support/fixtures.ts'
import type { ChatCompletion } from '../../../../src/domain/chat.ts'

const meta: ResponseMeta = {
  id: 'resp_abc',
  createdAt: 1_700_000_000,
  model: 'openai/gpt-4o-mini',
  request: parseResponsesRequest({
    model: 'openai/gpt-4o-mini',
    input: 'hi',
    instructions: 'Be brief',
    metadata: { team: 'a' },
    temperature: 0.3,
  }),
}

function completion(
  message: Partial<ChatCompletion['choices'][number]['message']>,
  finish: ChatCompletion['choices'][number]['finish_reason'] = 'stop',
): ChatCompletion {
  return {
    id: 'gen-1',
    object: 'chat.completion',
    created: 1,
    model: 'openai/gpt-4o-mini',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: null, ...message },
        logprobs: null,
        finish_reason: finish,
      },
    ],
    usage: { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 },
  }
}

describe('chat completion → Response', () => {
  it('derives the response id from the generation id', () => {
    expect(responseId('gen-AbC_d-123')).toBe('resp_AbC_d-123')
  })

  it('turns the OpenAI completion fixture into a completed response with a message and usage', () => {
    const c = readJsonFixture('openai-compat/completion.json') as ChatCompletion
    const r = toResponse({ ...c, model: 'openai/gpt-4o-mini' }, meta)
    expect(r).toMatchObject({
      id: 'resp_abc',
      object: 'response',
      created_at: 1_700_000_000,
      status: 'completed',
      error: null,
      incomplete_details: null,
      model: 'openai/gpt-4o-mini',
      instructions: 'Be brief',
      metadata: { team: 'a' },
      temperature: 0.3,
      output: [
        {
          type: 'message',
          id: 'msg_abc_0',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: c.choices[0]!.message.content, annotations: [] }],
        },
      ],
    })
    expect(r.usage).toEqual({
      input_tokens: c.usage!.prompt_tokens,
      input_tokens_details: { cached_tokens: c.usage!.prompt_tokens_details?.cached_tokens ?? 0 },
      output_tokens: c.usage!.completion_tokens,
      output_tokens_details: { reasoning_tokens: c.usage!.completion_tokens_details?.reasoning_tokens ?? 0 },
      total_tokens: c.usage!.total_tokens,
    })
  })

  it('gives reasoning, then the message, then each tool call as a function_call item', () => {
    const details = [
      { type: 'reasoning.text', text: 'think', signature: 'sig', format: 'anthropic-claude-v1', index: 0 },
    ]
    const r = toResponse(
      completion(
        {
          content: 'Calling.',
          reasoning: 'think',
          reasoning_details: details,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'a', arguments: '{}' } },
            { id: 'call_2', type: 'function', function: { name: 'b', arguments: '{"x":1}' } },
          ],
        },
        'tool_calls',
      ),
      meta,
    )
    expect(r.status).toBe('completed')
    expect(r.output).toEqual([
      {
        type: 'reasoning',
        id: 'rs_abc_0',
        summary: [{ type: 'summary_text', text: 'think' }],
        encrypted_content: expect.any(String),
      },
      {
        type: 'message',
        id: 'msg_abc_1',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text: 'Calling.', annotations: [], logprobs: [] }],
      },
      {
        type: 'function_call',
        id: 'fc_abc_2',
        call_id: 'call_1',
        name: 'a',
        arguments: '{}',
        status: 'completed',
      },
      {
        type: 'function_call',
        id: 'fc_abc_3',
        call_id: 'call_2',
        name: 'b',
        arguments: '{"x":1}',
        status: 'completed',
      },
    ])
    expect(fromEncryptedContent((r.output[0] as { encrypted_content: string }).encrypted_content)).toEqual(
      details,
    )
  })

  it('is incomplete for the output limit and for a content filter', () => {
    const cut = toResponse(completion({ content: 'Once upon' }, 'length'), meta)
    expect(cut.status).toBe('incomplete')
    expect(cut.incomplete_details).toEqual({ reason: 'max_output_tokens' })
    expect(cut.output[0]).toMatchObject({ status: 'incomplete' })
    const filtered = toResponse(completion({ content: '' }, 'content_filter'), meta)
    expect(filtered).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'content_filter' },
      output: [],
    })
  })

  it('keeps a refusal as a refusal part', () => {
    const r = toResponse(completion({ refusal: 'I cannot help with that.' }), meta)
    expect(r.output[0]).toMatchObject({
      type: 'message',
      content: [{ type: 'refusal', refusal: 'I cannot help with that.' }],
    })
  })
})

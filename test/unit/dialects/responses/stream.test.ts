import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../../src/errors.ts'
import { createLogger } from '../../../../src/logger.ts'
import { createChunkTranslator } from '../../../../src/providers/anthropic/stream.ts'
import { parseAnthropicEvent } from '../../../../src/providers/anthropic/wire.ts'
import { fromEncryptedContent } from '../../../../src/dialects/responses/request.ts'
import type { ResponseMeta } from '../../../../src/dialects/responses/response.ts'
import {
  createResponsesStreamTranslator,
  writeResponsesSse,
  type ResponsesEvent,
} from '../../../../src/dialects/responses/stream.ts'
import { parseResponsesRequest } from '../../../../src/schemas/responses.ts'
import { readFixture, readSseFixture } from '../../../support/fixtures.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const meta: ResponseMeta = {
  id: 'resp_abc',
  createdAt: 1_700_000_000,
  model: 'openai/gpt-4o-mini',
  request: parseResponsesRequest({ model: 'openai/gpt-4o-mini', input: 'hi', stream: true }),
}

function chunk(
  delta: ChatChunk['choices'][number]['delta'],
  finish: ChatChunk['choices'][number]['finish_reason'] = null,
): ChatChunk {
  return {
    id: 'gen-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'openai/gpt-4o-mini',
    choices: [{ index: 0, delta, finish_reason: finish }],
  }
}

function translateAll(chunks: ChatChunk[]): ResponsesEvent[] {
  const t = createResponsesStreamTranslator(meta)
  return [...t.start(), ...chunks.flatMap((c) => t.push(c)), ...t.finish()]
}

const types = (events: ResponsesEvent[]) => events.map((e) => e.type)

describe('Responses stream translation', () => {
  it('turns the OpenAI text fixture into the typed event sequence, numbered from 0', async () => {
    const chunks = readFixture('openai-compat/text.sse')
      .split('\n\n')
      .map((e) => e.replace(/^data: /, '').trim())
      .filter((d) => d !== '' && d !== '[DONE]')
      .map((d) => JSON.parse(d) as ChatChunk)
    const events = translateAll(chunks)
    expect(types(events)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ])
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i))
    expect(events[4]).toMatchObject({
      item_id: 'msg_abc_0',
      output_index: 0,
      content_index: 0,
      delta: 'Hello',
    })
    const completed = events.at(-1)!.response as Record<string, unknown>
    expect(completed).toMatchObject({
      id: 'resp_abc',
      status: 'completed',
      output: [
        {
          type: 'message',
          id: 'msg_abc_0',
          status: 'completed',
          content: [{ type: 'output_text', text: 'Hello', annotations: [] }],
        },
      ],
    })
  })

  it('streams tool calls as function_call items, arguments by delta, done at the end', () => {
    const events = translateAll([
      chunk({ role: 'assistant', content: 'Let me look.' }),
      chunk({
        tool_calls: [
          { index: 0, id: 'call_1', type: 'function', function: { name: 'a', arguments: '{"x"' } },
        ],
      }),
      chunk({
        tool_calls: [{ index: 1, id: 'call_2', type: 'function', function: { name: 'b', arguments: '{}' } }],
      }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: ':1}' } }] }),
      chunk({}, 'tool_calls'),
    ])
    const added = events.filter((e) => e.type === 'response.output_item.added').map((e) => e.item)
    expect(added).toEqual([
      { type: 'message', id: 'msg_abc_0', status: 'in_progress', role: 'assistant', content: [] },
      {
        type: 'function_call',
        id: 'fc_abc_1',
        call_id: 'call_1',
        name: 'a',
        arguments: '',
        status: 'in_progress',
      },
      {
        type: 'function_call',
        id: 'fc_abc_2',
        call_id: 'call_2',
        name: 'b',
        arguments: '',
        status: 'in_progress',
      },
    ])
    const argDone = events.filter((e) => e.type === 'response.function_call_arguments.done')
    expect(argDone.map((e) => [e.output_index, e.arguments])).toEqual([
      [1, '{"x":1}'],
      [2, '{}'],
    ])
    const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta')
    expect(deltas.map((e) => [e.item_id, e.delta])).toEqual([
      ['fc_abc_1', '{"x"'],
      ['fc_abc_2', '{}'],
      ['fc_abc_1', ':1}'],
    ])
    // The message closes when the first call opens.
    const messageDone = types(events).indexOf('response.output_item.done')
    expect(messageDone).toBeLessThan(types(events).indexOf('response.function_call_arguments.delta'))
    expect(events.at(-1)!.type).toBe('response.completed')
  })

  it('ends incomplete with the reason when the output limit stopped the answer', () => {
    const events = translateAll([chunk({ content: 'Once upon' }), chunk({}, 'length')])
    const last = events.at(-1)!
    expect(last.type).toBe('response.incomplete')
    expect(last.response).toMatchObject({
      status: 'incomplete',
      incomplete_details: { reason: 'max_output_tokens' },
    })
    expect(events.find((e) => e.type === 'response.output_item.done')!.item).toMatchObject({
      status: 'incomplete',
    })
  })

  it('takes usage from the usage chunk into the final response', () => {
    const t = createResponsesStreamTranslator(meta)
    t.start()
    t.push(chunk({ content: 'x' }, 'stop'))
    t.push({
      ...chunk({}),
      choices: [],
      usage: {
        prompt_tokens: 10,
        completion_tokens: 4,
        total_tokens: 14,
        prompt_tokens_details: { cached_tokens: 6 },
        completion_tokens_details: { reasoning_tokens: 2 },
      },
    })
    expect(t.finish().at(-1)!.response).toMatchObject({
      usage: {
        input_tokens: 10,
        input_tokens_details: { cached_tokens: 6 },
        output_tokens: 4,
        output_tokens_details: { reasoning_tokens: 2 },
        total_tokens: 14,
      },
    })
  })

  it('gives Anthropic thinking as a reasoning item with its summary, and the signature in encrypted_content', async () => {
    const translate = createChunkTranslator({ id: '', model: 'claude-sonnet-4-5', created: 1 })
    const chunks = (await readSseFixture('anthropic/thinking.sse')).flatMap((raw) => {
      const r = parseAnthropicEvent(raw)
      return r.ok && r.event ? translate(r.event) : []
    })
    const events = translateAll(chunks)
    expect(types(events).slice(2, 8)).toEqual([
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
    ])
    const output = (events.at(-1)!.response as { output: Record<string, unknown>[] }).output
    expect(output.map((o) => o.type)).toEqual(['reasoning', 'message'])
    const reasoning = output[0] as { summary: { text: string }[]; encrypted_content: string }
    expect(reasoning.summary[0]!.text).toMatch(/^I need to find the GCD.*So GCD is 21\.$/s)
    expect(fromEncryptedContent(reasoning.encrypted_content)).toEqual([
      expect.objectContaining({
        signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
        text: reasoning.summary[0]!.text,
      }),
    ])
  })

  it('writes each event as `event: <type>` and `data: <json>`, and a failure as an error event', async () => {
    async function* batches(): AsyncGenerator<ChatChunk[]> {
      yield [chunk({ content: 'Hal' })]
      throw new GatewayError('upstream_error', 'upstream openai failed mid-stream')
    }
    let text = ''
    const signal = new AbortController().signal
    for await (const s of writeResponsesSse(batches(), meta, {
      signal,
      requestId: 'req-1',
      log: createLogger('silent'),
    }))
      text += s
    const frames = text.split('\n\n').filter((f) => f !== '')
    expect(frames[0]).toMatch(/^event: response\.created\ndata: \{"type":"response\.created",/)
    const last = frames.at(-1)!
    expect(last.split('\n')[0]).toBe('event: error')
    const data = JSON.parse(last.split('\n')[1]!.slice('data: '.length))
    expect(data).toEqual({
      type: 'error',
      code: 'upstream_error',
      message: 'upstream openai failed mid-stream',
      param: null,
      sequence_number: frames.length - 1,
    })
    expect(text).not.toContain('response.completed')
  })
})

import { describe, expect, it } from 'vitest'
import { createEventTranslator } from '../../../../src/dialects/anthropic/stream.ts'
import { createChunkTranslator } from '../../../../src/providers/anthropic/stream.ts'
import { parseAnthropicEvent, type AnthropicEvent } from '../../../../src/providers/anthropic/wire.ts'
import { rebuildMessage } from '../../../support/anthropic-events.ts'
import { readSseFixture } from '../../../support/fixtures.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const meta = { id: 'gen-1', model: 'anthropic/claude-sonnet-4-5' }

async function upstreamEvents(name: string): Promise<AnthropicEvent[]> {
  return (await readSseFixture(`anthropic/${name}`)).map((raw) => {
    const r = parseAnthropicEvent(raw)
    if (!r.ok || r.event === undefined)
      throw new Error(`fixture event does not parse: ${JSON.stringify(raw)}`)
    return r.event
  })
}

/** Upstream Anthropic events → chat chunks (the provider adapter) → Anthropic events again (the dialect). */
async function roundTrip(name: string) {
  const upstream = await upstreamEvents(name)
  const toChunks = createChunkTranslator({ id: '', model: 'claude-sonnet-4-5', created: 0 })
  const translate = createEventTranslator(meta)
  // One batch per upstream event, as the relay passes them on.
  const out = upstream.flatMap((e) => translate(toChunks(e)))
  out.push(...translate.end())
  return { upstream, out }
}

const chunk = (
  delta: ChatChunk['choices'][number]['delta'],
  finish: ChatChunk['choices'][number]['finish_reason'] = null,
): ChatChunk => ({
  id: 'gen-1',
  object: 'chat.completion.chunk',
  created: 0,
  model: 'openai/gpt-x',
  choices: [{ index: 0, delta, finish_reason: finish }],
})

describe('chat chunks → Anthropic stream events', () => {
  it('gives back the thinking text, its signature and the text of an Anthropic stream unchanged', async () => {
    const { upstream, out } = await roundTrip('thinking.sse')
    const before = rebuildMessage(upstream)
    const after = rebuildMessage(out)
    expect(after.content).toEqual(before.content)
    expect(after.content[0]).toMatchObject({
      type: 'thinking',
      signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
    })
    expect(after.stop_reason).toBe('end_turn')
    expect(after.usage).toMatchObject({ input_tokens: 41, output_tokens: 178 })
  })

  it('gives back text and a tool call (its streamed input) of an Anthropic stream', async () => {
    const { upstream, out } = await roundTrip('tool-use.sse')
    const before = rebuildMessage(upstream)
    const after = rebuildMessage(out)
    expect(after.content).toEqual(before.content)
    expect(after.content.some((b) => b.type === 'tool_use')).toBe(true)
    expect(after.stop_reason).toBe('tool_use')
  })

  it('keeps interleaved thinking and parallel tool calls in order', async () => {
    const { upstream, out } = await roundTrip('thinking-parallel-tools.sse')
    expect(rebuildMessage(out).content).toEqual(rebuildMessage(upstream).content)
  })

  it('follows the documented event order: message_start, ping, blocks one at a time, message_delta, message_stop', async () => {
    const { out } = await roundTrip('thinking.sse')
    const types = out.map((e) => e.type)
    expect(types.slice(0, 3)).toEqual(['message_start', 'ping', 'content_block_start'])
    expect(types.slice(-2)).toEqual(['message_delta', 'message_stop'])
    let open: number | undefined
    for (const e of out) {
      if (e.type === 'content_block_start') {
        expect(open).toBeUndefined()
        open = e.index as number
      }
      if (e.type === 'content_block_delta') expect(e.index).toBe(open)
      if (e.type === 'content_block_stop') {
        expect(e.index).toBe(open)
        open = undefined
      }
    }
    expect(open).toBeUndefined()
  })

  it('turns an OpenAI-style stream (reasoning, text, a tool call, usage) into Anthropic events', () => {
    const translate = createEventTranslator(meta)
    const events = [
      ...translate([chunk({ role: 'assistant', content: '' }), chunk({ reasoning: 'Let me think.' })]),
      ...translate([chunk({ content: 'Calling.' })]),
      ...translate([
        chunk({
          tool_calls: [
            { index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } },
          ],
        }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: '{"location":' } }] }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
        chunk({}, 'tool_calls'),
        {
          ...chunk({}),
          choices: [],
          usage: {
            prompt_tokens: 30,
            completion_tokens: 12,
            total_tokens: 42,
            prompt_tokens_details: { cached_tokens: 10 },
          },
        },
      ]),
      ...translate.end(),
    ]
    expect(events[0]).toMatchObject({
      type: 'message_start',
      message: { id: 'gen-1', model: 'openai/gpt-x', role: 'assistant' },
    })
    expect(rebuildMessage(events)).toEqual({
      content: [
        { type: 'thinking', thinking: 'Let me think.', signature: '' },
        { type: 'text', text: 'Calling.' },
        { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { location: 'Paris' } },
      ],
      stop_reason: 'tool_use',
      usage: {
        input_tokens: 20,
        output_tokens: 12,
        cache_read_input_tokens: 10,
        cache_creation_input_tokens: 0,
      },
    })
  })

  it('maps the output limit to max_tokens, and ends an empty stream with a whole message', () => {
    const translate = createEventTranslator(meta)
    translate([chunk({ content: 'abc' }, 'length')])
    expect(translate.end().find((e) => e.type === 'message_delta')).toMatchObject({
      delta: { stop_reason: 'max_tokens' },
    })
    const empty = createEventTranslator(meta)
    expect(empty.end().map((e) => e.type)).toEqual(['message_start', 'ping', 'message_delta', 'message_stop'])
    expect(empty.end()).toEqual([])
  })
})

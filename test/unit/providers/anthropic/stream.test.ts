import { describe, expect, it } from 'vitest'
import { createChunkTranslator } from '../../../../src/providers/anthropic/stream.ts'
import { parseAnthropicEvent, type AnthropicEvent } from '../../../../src/providers/anthropic/wire.ts'
import { reassemble } from '../../../support/chunks.ts'
import { readSseFixture } from '../../../support/fixtures.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const meta = { id: '', model: 'claude-sonnet-4-5', created: 1_700_000_000 }

/** Every fixture event must parse with the wire schema before it is translated. */
async function parsedEvents(name: string): Promise<AnthropicEvent[]> {
  return (await readSseFixture(`anthropic/${name}`)).map((raw) => {
    const r = parseAnthropicEvent(raw)
    if (!r.ok || r.event === undefined)
      throw new Error(`fixture event does not parse: ${JSON.stringify(raw)}`)
    return r.event
  })
}

const deltas = (chunks: ChatChunk[]) =>
  chunks.filter((c) => c.choices.length > 0).map((c) => c.choices[0]!.delta)

describe('Anthropic stream translation', () => {
  it('turns the documented text stream into OpenAI chunks, one per event that carries something', async () => {
    const translate = createChunkTranslator(meta)
    const chunks = (await parsedEvents('text.sse')).flatMap(translate)
    const id = 'msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY'
    const base = { id, object: 'chat.completion.chunk', created: 1_700_000_000, model: 'claude-sonnet-4-5' }
    const choice = (delta: object, finish: string | null = null) => ({
      ...base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    })
    expect(chunks).toEqual([
      choice({ role: 'assistant', content: '' }),
      choice({ content: 'Hello' }),
      choice({ content: '!' }),
      choice({}, 'stop'),
      {
        ...base,
        choices: [],
        usage: {
          prompt_tokens: 25,
          completion_tokens: 15,
          total_tokens: 40,
          prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
          completion_tokens_details: { reasoning_tokens: 0 },
        },
      },
    ])
    expect(translate.state).toMatchObject({ started: true, stopped: true, finishReason: 'stop' })
  })

  it('streams a tool call as id and name first, then argument deltas as they arrive', async () => {
    const chunks = (await parsedEvents('tool-use.sse')).flatMap(createChunkTranslator(meta))
    const toolDeltas = deltas(chunks).filter((d) => d.tool_calls)
    expect(toolDeltas[0]!.tool_calls).toEqual([
      {
        index: 0,
        id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6',
        type: 'function',
        function: { name: 'get_weather', arguments: '' },
      },
    ])
    // The empty first partial_json is skipped; each other piece is its own delta.
    expect(toolDeltas.slice(1).map((d) => d.tool_calls![0]!.function!.arguments)).toEqual([
      '{"location":',
      ' "San',
      ' Francisc',
      'o,',
      ' CA"',
      ', ',
      '"unit": "fah',
      'renheit"}',
    ])
    const whole = reassemble(chunks)
    expect(whole.content).toBe("Okay, let's check the weather for San Francisco, CA:")
    expect(whole.calls).toEqual([
      {
        id: 'toolu_01T1x1fJ34qAmk2tNTrN7Up6',
        name: 'get_weather',
        arguments: '{"location": "San Francisco, CA", "unit": "fahrenheit"}',
      },
    ])
    expect(JSON.parse(whole.calls[0]!.arguments)).toEqual({
      location: 'San Francisco, CA',
      unit: 'fahrenheit',
    })
    expect(whole.finish).toBe('tool_calls')
    expect(whole.usage).toMatchObject({ prompt_tokens: 472, completion_tokens: 89 })
  })

  it('streams thinking as reasoning deltas and one signed reasoning detail when the block ends', async () => {
    const chunks = (await parsedEvents('thinking.sse')).flatMap(createChunkTranslator(meta))
    const whole = reassemble(chunks)
    const thinking =
      'I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n1071 = 2 × 462 + 147\n462 = 3 × 147 + 21\n147 = 7 × 21 + 0\n\nSo GCD is 21.'
    expect(whole.reasoning).toBe(thinking)
    expect(whole.details).toEqual([
      {
        type: 'reasoning.text',
        text: thinking,
        signature: 'EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds',
        format: 'anthropic-claude-v1',
        index: 0,
      },
    ])
    expect(whole.content).toBe('The greatest common divisor of 1071 and 462 is **21**.')
    // The detail goes out before the answer text starts.
    const order = deltas(chunks).map((d) => Object.keys(d).join())
    expect(order.indexOf('reasoning_details')).toBeLessThan(order.indexOf('content', 1))
    expect(whole.usage?.completion_tokens_details?.reasoning_tokens).toBeGreaterThan(0)
  })

  it('streams thinking and parallel tool calls with their own indexes, and cache usage', async () => {
    const chunks = (await parsedEvents('thinking-parallel-tools.sse')).flatMap(createChunkTranslator(meta))
    const whole = reassemble(chunks)
    expect(whole.calls).toEqual([
      {
        id: 'toolu_01A09q90qw90lq917835lq9',
        name: 'get_weather',
        arguments: '{"location": "Paris, France"}',
      },
      { id: 'toolu_01B81k2j3k4j5k6j7k8j9k0', name: 'get_weather', arguments: '{"location": "Tokyo, Japan"}' },
    ])
    expect(whole.details).toHaveLength(1)
    expect(whole.finish).toBe('tool_calls')
    expect(whole.usage).toMatchObject({
      prompt_tokens: 12 + 1024 + 2051,
      completion_tokens: 146,
      prompt_tokens_details: { cached_tokens: 1024, cache_write_tokens: 2051 },
    })
  })

  it('leaves reasoning out with exclude, still counting its tokens', async () => {
    const chunks = (await parsedEvents('thinking.sse')).flatMap(
      createChunkTranslator(meta, { excludeReasoning: true }),
    )
    const whole = reassemble(chunks)
    expect(whole.reasoning).toBe('')
    expect(whole.details).toEqual([])
    expect(whole.content).toBe('The greatest common divisor of 1071 and 462 is **21**.')
    expect(whole.usage?.completion_tokens).toBe(178)
  })

  it('replaces usage with message_delta (cumulative), never adds', () => {
    const translate = createChunkTranslator(meta)
    translate({
      type: 'message_start',
      message: { id: 'msg_1', usage: { input_tokens: 10, output_tokens: 1 } },
    })
    translate({ type: 'message_delta', delta: { stop_reason: null }, usage: { output_tokens: 5 } })
    translate({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 9 } })
    expect(translate.state.usage).toEqual({ input_tokens: 10, output_tokens: 9 })
    expect(translate.usage()).toMatchObject({ prompt_tokens: 10, completion_tokens: 9, total_tokens: 19 })
  })

  it('gives the usage chunk at end() when message_stop is missing after a complete answer', async () => {
    const events = (await parsedEvents('text.sse')).filter((e) => e.type !== 'message_stop')
    const translate = createChunkTranslator(meta)
    const chunks = events.flatMap(translate)
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop')
    expect(translate.end()).toEqual([
      expect.objectContaining({ choices: [], usage: expect.objectContaining({ total_tokens: 40 }) }),
    ])
    expect(translate.end()).toEqual([])
  })

  it('gives nothing at end() for a stream cut before message_delta', async () => {
    const translate = createChunkTranslator(meta)
    ;(await parsedEvents('text.sse')).slice(0, 4).forEach((e) => translate(e))
    expect(translate.state.finishReason).toBeNull()
    expect(translate.end()).toEqual([])
  })

  it('ignores unknown event types and rejects malformed known ones', () => {
    expect(parseAnthropicEvent({ type: 'content_block_future', index: 0 })).toEqual({
      ok: true,
      event: undefined,
    })
    expect(parseAnthropicEvent({ type: 'content_block_delta' }).ok).toBe(false)
    expect(parseAnthropicEvent('nope').ok).toBe(false)
    // An unknown delta type inside a known event passes and translates to nothing.
    const r = parseAnthropicEvent({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'citations_delta', citation: {} },
    })
    expect(r.ok && r.event && createChunkTranslator(meta)(r.event)).toEqual([])
  })

  it('a tool input that arrives whole still reassembles to its JSON', async () => {
    const translate = createChunkTranslator(meta)
    const whole = reassemble((await parsedEvents('tool-no-args.sse')).flatMap(translate))
    expect(whole.calls).toEqual([
      { id: 'toolu_01NoArgs', name: 'get_time', arguments: '{}' },
      { id: 'toolu_01WholeInput', name: 'move', arguments: '{"player":"player1"}' },
    ])
    for (const c of whole.calls) expect(() => JSON.parse(c.arguments)).not.toThrow()
    expect(whole.finish).toBe('tool_calls')
    expect(translate.state.violation).toBeUndefined()
  })

  it('translates a message whose content and stop reason come in message_start', async () => {
    const translate = createChunkTranslator(meta)
    const whole = reassemble((await parsedEvents('whole-message-start.sse')).flatMap(translate))
    expect(whole.calls).toEqual([{ id: 'toolu_01Whole', name: 'roll_dice', arguments: '{"sides":6}' }])
    expect(whole.finish).toBe('tool_calls')
    expect(whole.usage).toMatchObject({ prompt_tokens: 50, completion_tokens: 20 })
    expect(translate.state.violation).toBeUndefined()
  })

  it('marks a message_stop without any stop reason as a protocol violation', async () => {
    const translate = createChunkTranslator(meta)
    const chunks = (await parsedEvents('no-stop-reason.sse')).flatMap(translate)
    expect(translate.state.violation).toBe('message_stop without a stop reason')
    expect(chunks.some((c) => c.usage)).toBe(false)
  })

  it('marks a second message_start inside an unfinished message as a protocol violation', async () => {
    const translate = createChunkTranslator(meta)
    const events = await parsedEvents('second-message-start.sse')
    const before = events.slice(0, 3).flatMap(translate)
    expect(translate.state.violation).toBeUndefined()
    expect(translate(events[3]!)).toEqual([])
    expect(translate.state.violation).toBe('a second message_start before message_stop')
    expect(before).toHaveLength(3)
  })

  it('ignores a message_start repeating the open message’s id; another id is still a violation', async () => {
    const translate = createChunkTranslator(meta)
    const chunks = (await parsedEvents('duplicate-message-start.sse')).flatMap(translate)
    expect(translate.state.violation).toBeUndefined()
    const ds = deltas(chunks)
    expect(ds.filter((d) => d.role === 'assistant')).toHaveLength(1)
    expect(ds.map((d) => d.content ?? '').join('')).toBe('Hello again!')
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 25, completion_tokens: 15 })

    // The neighbour: the same stream with the repeat naming another message is refused at the repeat.
    const spliced = createChunkTranslator(meta)
    const events = await parsedEvents('duplicate-message-start.sse')
    const other = events.map((e, i) =>
      i === 4 && e.type === 'message_start' ? { ...e, message: { ...e.message, id: 'msg_01Other' } } : e,
    )
    other.slice(0, 4).flatMap(spliced)
    expect(spliced.state.violation).toBeUndefined()
    expect(spliced(other[4]!)).toEqual([])
    expect(spliced.state.violation).toBe('a second message_start before message_stop')
  })

  it('a delta for a block never opened is a violation', () => {
    const translate = createChunkTranslator(meta)
    translate({ type: 'message_start', message: { id: 'm' } })
    translate({ type: 'content_block_delta', index: 3, delta: { type: 'text_delta', text: 'x' } })
    expect(translate.state.violation).toBe('content_block_delta for block 3, which is not open')
  })

  it('streams a refusal’s explanation as delta.refusal before the finish', async () => {
    const chunks = (await parsedEvents('refusal-stream.sse')).flatMap(createChunkTranslator(meta))
    const ds = deltas(chunks)
    expect(ds.map((d) => d.refusal).filter(Boolean)).toEqual([
      "This request asks for working malware, which I can't help with.",
    ])
    expect(reassemble(chunks).finish).toBe('content_filter')
  })

  it('reports the thinking tokens Anthropic counted when the stream carries them', async () => {
    const translate = createChunkTranslator(meta)
    const whole = reassemble((await parsedEvents('thinking-tokens.sse')).flatMap(translate))
    expect(whole.usage?.completion_tokens_details).toEqual({ reasoning_tokens: 139 })
    expect(whole.content).toBe('7')
  })

  it('sums the usage of every compaction iteration (message_delta carries them)', async () => {
    const translate = createChunkTranslator(meta)
    const whole = reassemble((await parsedEvents('compaction.sse')).flatMap(translate))
    // Top level: 682 in / 1 320 out, the last iteration's only; the iterations sum to 61 067 / 1 912.
    expect(whole.usage).toMatchObject({
      prompt_tokens: 61_067,
      completion_tokens: 1912,
      total_tokens: 62_979,
    })
    expect(translate.usage()).toMatchObject({ prompt_tokens: 61_067, completion_tokens: 1912 })
    expect(whole.content).toContain('Lyon')
  })
})

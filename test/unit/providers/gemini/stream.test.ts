import { describe, expect, it } from 'vitest'
import { fromGeminiResponse } from '../../../../src/providers/gemini/response.ts'
import { createChunkTranslator } from '../../../../src/providers/gemini/stream.ts'
import { geminiResponseSchema, type GeminiResponse } from '../../../../src/providers/gemini/wire.ts'
import { reassemble } from '../../../support/chunks.ts'
import { readJsonFixture, readSseFixture } from '../../../support/fixtures.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const meta = { id: '', model: 'gemini-2.5-flash', created: 1_700_000_000 }

async function parsedEvents(name: string): Promise<GeminiResponse[]> {
  return (await readSseFixture(`gemini/${name}`)).map((e) => geminiResponseSchema.parse(e))
}

/** All events, then end(): what the adapter does with a complete stream. */
function run(events: GeminiResponse[], options = {}): ChatChunk[] {
  const translate = createChunkTranslator(meta, options)
  return [...events.flatMap(translate), ...translate.end()]
}

describe('Gemini stream translation', () => {
  it('turns the CRLF-framed text stream into OpenAI chunks, usage last', async () => {
    const chunks = run(await parsedEvents('text.sse'))
    const base = {
      id: 'R3sp0nse1d',
      object: 'chat.completion.chunk',
      created: 1_700_000_000,
      model: 'gemini-2.5-flash',
    }
    const choice = (delta: object, finish: string | null = null) => ({
      ...base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
    })
    expect(chunks).toEqual([
      choice({ role: 'assistant', content: '' }),
      choice({ content: 'The' }),
      choice({ content: ' sky appears blue because of Rayleigh' }),
      choice({ content: ' scattering.' }),
      choice({}, 'stop'),
      {
        ...base,
        choices: [],
        usage: {
          prompt_tokens: 8,
          completion_tokens: 37,
          total_tokens: 45,
          prompt_tokens_details: { cached_tokens: 0 },
          completion_tokens_details: { reasoning_tokens: 25 },
        },
      },
    ])
  })

  it('streams parallel function calls whole, with the signature, and takes usage sent after the finish', async () => {
    const chunks = run(await parsedEvents('parallel-function-calls.sse'))
    const whole = reassemble(chunks)
    expect(whole.calls).toEqual([
      { id: 'call_0_get_weather', name: 'get_weather', arguments: '{"location":"Paris, France"}' },
      { id: 'call_1_get_weather', name: 'get_weather', arguments: '{"location":"Tokyo, Japan"}' },
    ])
    expect(whole.details).toEqual([
      expect.objectContaining({ type: 'reasoning.encrypted', id: 'call_0_get_weather', index: 0 }),
    ])
    expect(whole.finish).toBe('tool_calls')
    // The usage-only event after finishReason wins (cumulative: replace, don't add).
    expect(whole.usage).toMatchObject({
      prompt_tokens: 120,
      completion_tokens: 96,
      prompt_tokens_details: { cached_tokens: 96 },
    })
  })

  it('assembles function-call arguments streamed in pieces (Vertex partialArgs)', async () => {
    const chunks = run(await parsedEvents('vertex-streamed-args.sse'))
    const whole = reassemble(chunks)
    expect(whole.calls).toEqual([
      {
        id: 'call_0_cook_recipe',
        name: 'cook_recipe',
        arguments: JSON.stringify({
          recipe: {
            name: 'Lasagna "al forno"',
            ingredients: [{ name: 'Noodles', grams: 500 }, { name: 'Ricotta' }],
            vegetarian: true,
            notes: null,
          },
        }),
      },
      { id: 'call_1_set_timer', name: 'set_timer', arguments: '{"minutes":45}' },
    ])
    for (const call of whole.calls) expect(() => JSON.parse(call.arguments)).not.toThrow()
    expect(whole.finish).toBe('tool_calls')
    expect(whole.details).toEqual([
      expect.objectContaining({ type: 'reasoning.encrypted', id: 'call_0_cook_recipe' }),
    ])
    expect(whole.usage).toMatchObject({ prompt_tokens: 40, completion_tokens: 140 })
  })

  it('closes a streamed call that a new call follows without its closing piece', () => {
    const part = (functionCall: Record<string, unknown>) => ({ functionCall })
    const event = (parts: object[], finishReason?: string) =>
      geminiResponseSchema.parse({
        candidates: [{ content: { parts }, ...(finishReason ? { finishReason } : {}) }],
      })
    const whole = reassemble(
      run([
        event([part({ name: 'first', willContinue: true })]),
        event([part({ partialArgs: [{ jsonPath: '$.n', numberValue: 1 }], willContinue: true })]),
        event([part({ name: 'second', args: { m: 2 } })], 'STOP'),
      ]),
    )
    expect(whole.calls).toEqual([
      { id: 'call_0_first', name: 'first', arguments: '{"n":1}' },
      { id: 'call_1_second', name: 'second', arguments: '{"m":2}' },
    ])
    expect(whole.finish).toBe('tool_calls')
  })

  it('stops at streamed arguments that cannot be assembled, with a violation', async () => {
    const translate = createChunkTranslator(meta)
    const events = await parsedEvents('vertex-streamed-args.sse')
    translate(events[0]!)
    const gap = geminiResponseSchema.parse({
      candidates: [
        {
          content: {
            parts: [
              {
                functionCall: { partialArgs: [{ jsonPath: '$.xs[5]', numberValue: 1 }], willContinue: true },
              },
            ],
          },
        },
      ],
    })
    translate(gap)
    expect(translate.state.violation).toMatch(/skips array elements/)
    expect(translate(events.at(-1)!)).toEqual([])
  })

  it('gives the same answer streamed as blocking', async () => {
    const streamed = reassemble(run(await parsedEvents('parallel-function-calls.sse')))
    const blocking = fromGeminiResponse(
      geminiResponseSchema.parse(readJsonFixture('gemini/parallel-function-calls.json')),
      meta,
    )
    const m = blocking.choices[0]!.message
    expect(streamed.calls).toEqual(
      m.tool_calls!.map((t) => ({ id: t.id, name: t.function.name, arguments: t.function.arguments })),
    )
    expect(streamed.details).toEqual(m.reasoning_details)
  })

  it('streams thought summaries as reasoning, closed into a detail when the answer starts', async () => {
    const chunks = run(await parsedEvents('thinking.sse'))
    const whole = reassemble(chunks)
    expect(whole.reasoning).toBe(
      '**Analyzing the request**\n\nThe user asks for the GCD of 1071 and 462. Applying Euclid: 1071 = 2×462 + 147, 462 = 3×147 + 21, 147 = 7×21.',
    )
    expect(whole.content).toBe('The GCD of 1071 and 462 is 21.')
    expect(whole.details).toEqual([
      { type: 'reasoning.text', text: whole.reasoning, format: 'google-gemini-v1', index: 0 },
      { type: 'reasoning.encrypted', data: 'Eq0DCqoDAVSoXO7G2zk4n0sJ', format: 'google-gemini-v1', index: 1 },
    ])
    expect(whole.usage).toMatchObject({
      completion_tokens: 281,
      completion_tokens_details: { reasoning_tokens: 270 },
    })
    const excluded = reassemble(run(await parsedEvents('thinking.sse'), { excludeReasoning: true }))
    expect(excluded.reasoning).toBe('')
    expect(excluded.details).toEqual([expect.objectContaining({ type: 'reasoning.encrypted', index: 0 })])
  })

  it('has no usage chunk and no finish for a stream cut before its last event', async () => {
    const translate = createChunkTranslator(meta)
    ;(await parsedEvents('text.sse')).slice(0, 2).forEach((e) => translate(e))
    expect(translate.state.finishReason).toBeNull()
    expect(translate.end()).toEqual([])
  })

  it('finishes with content_filter on a blocked prompt or a safety stop', () => {
    const blocked = run([geminiResponseSchema.parse(readJsonFixture('gemini/prompt-blocked.json'))])
    expect(blocked.map((c) => c.choices[0]?.finish_reason ?? null).filter(Boolean)).toEqual([
      'content_filter',
    ])
    expect(blocked.at(-1)!.usage).toMatchObject({ prompt_tokens: 12 })
    const safety = reassemble(run([geminiResponseSchema.parse(readJsonFixture('gemini/safety.json'))]))
    expect(safety).toMatchObject({ content: '', finish: 'content_filter' })
  })
})

import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { createLogger } from '../../../src/logger.ts'
import { readSse } from '../../support/sse.ts'
import {
  addUpstreamEvents,
  deltaChunk,
  newChunkMeta,
  upstreamEventsOf,
} from '../../../src/providers/shared/stream.ts'
import { translateSse, type SseEvents, type StreamStep } from '../../../src/providers/shared/upstream.ts'
import type { UpstreamCall } from '../../../src/providers/types.ts'
import type { ChatChunk } from '../../../src/domain/chat.ts'

// The loop every protocol's stream runs through: which chunks come out together, and what happens
// around the end marker and a failure. The body is given as the pieces an upstream read would return,
// its events parsed as exchange.ts's `openSse` parses them (one batch a piece).

const call: UpstreamCall = {
  upstream: {
    name: 'up',
    kind: 'openai-compat',
    baseUrl: 'http://127.0.0.1',
    headers: {},
    timeouts: { connectMs: 5_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: 5_000 },
    outputLimitField: 'max_tokens',
    retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
    maxResponseBytes: 1024,
    latencyMs: 0,
  },
  upstreamModel: 'm',
  signal: new AbortController().signal,
  log: createLogger('silent'),
}

const meta = newChunkMeta('m', 0)
const chunk = (text: string): ChatChunk => deltaChunk('id', meta, { content: text })
const event = (text: string): string => `data: ${JSON.stringify({ text })}\n\n`
const ROLE = 'data: {"role":true}\n\n'
/**
 * One step per event: its text as one chunk, or the role chunk (no output yet); "end" ends the stream
 * with the protocol's own marker.
 */
const onEvent = (json: unknown): StreamStep => {
  const { text, role } = json as { text: string; role?: boolean }
  if (role) return { chunks: [deltaChunk('id', meta, { role: 'assistant' })] }
  return text === 'end' ? { chunks: [chunk('last')], last: true } : { chunks: [chunk(text)] }
}

function responseOf(pieces: string[]): { open: () => Promise<SseEvents>; body: Readable } {
  const body = Readable.from(pieces.map((p) => Buffer.from(p)))
  const batches = readSse(body)
  const events: SseEvents = {
    next: () => batches.next(),
    return: () => batches.return(undefined),
    close: () => void body.destroy(),
    [Symbol.asyncIterator]() {
      return this
    },
  }
  return { open: () => Promise.resolve(events), body }
}

/** Each batch as the texts of its chunks. */
async function batchesOf(stream: AsyncIterable<ChatChunk[]>): Promise<string[][]> {
  const out: string[][] = []
  for await (const batch of stream) out.push(batch.map((c) => c.choices[0]?.delta.content ?? 'role'))
  return out
}

describe('translateSse', () => {
  it('yields each chunk alone up to the first output, then those of one piece of the body together', async () => {
    const { open } = responseOf([
      ROLE + ROLE + event('a') + event('b') + event('c'),
      'data: {"te',
      'xt":"d"}\n\n' + event('e'),
      event('f'),
    ])
    expect(await batchesOf(translateSse(call, open, onEvent))).toEqual([
      ['role'],
      ['role'],
      ['a'],
      ['b', 'c'],
      ['d', 'e'],
      ['f'],
    ])
  })

  it("stops at the marker and adds onEnd's chunks to the last batch, told the stream was marked", async () => {
    const ends: boolean[] = []
    const { open, body } = responseOf([event('a') + event('b') + 'data: [DONE]\n\n' + event('never')])
    const stream = translateSse(call, open, onEvent, {
      marker: '[DONE]',
      onEnd: (marked) => {
        ends.push(marked)
        return [chunk('tail')]
      },
    })
    expect(await batchesOf(stream)).toEqual([['a'], ['b', 'tail']])
    expect(ends).toEqual([true])
    expect(body.destroyed).toBe(true)
  })

  it('a step marked last ends the stream after its own chunks', async () => {
    const { open } = responseOf([event('a') + event('b') + event('end') + event('never')])
    const ends: boolean[] = []
    const stream = translateSse(call, open, onEvent, {
      onEnd: (marked) => {
        ends.push(marked)
        return []
      },
    })
    expect(await batchesOf(stream)).toEqual([['a'], ['b', 'last']])
    expect(ends).toEqual([true])
  })

  it('tells onEnd when the body ran out without a marker', async () => {
    const { open } = responseOf([event('a')])
    const ends: boolean[] = []
    const stream = translateSse(call, open, onEvent, {
      marker: '[DONE]',
      onEnd: (marked) => {
        ends.push(marked)
        return []
      },
    })
    expect(await batchesOf(stream)).toEqual([['a']])
    expect(ends).toEqual([false])
  })

  it('sends the chunks before a malformed event in the same piece, then fails with a 502', async () => {
    const { open, body } = responseOf([
      event('a') + event('b') + event('c') + 'data: {not json\n\n' + event('d'),
    ])
    const it = translateSse(call, open, onEvent)
    const contents = (r: IteratorResult<ChatChunk[]>) =>
      r.done ? [] : r.value.map((c) => c.choices[0]?.delta.content)
    expect(contents(await it.next())).toEqual(['a'])
    expect(contents(await it.next())).toEqual(['b', 'c'])
    const failure = await it.next().catch((err: unknown) => err)
    expect(failure).toBeInstanceOf(GatewayError)
    expect((failure as GatewayError).status).toBe(502)
    expect(body.destroyed).toBe(true)
  })

  it("passes onEvent's own error on after the chunks before it", async () => {
    const refusal = new GatewayError('upstream_error', 'failed mid-stream')
    const { open } = responseOf([event('a') + event('b') + event('boom')])
    const failing = (json: unknown): StreamStep => {
      if ((json as { text: string }).text === 'boom') throw refusal
      return onEvent(json)
    }
    const seen: string[][] = []
    const run = async () => {
      for await (const batch of translateSse(call, open, failing))
        seen.push(batch.map((c) => c.choices[0]?.delta.content ?? ''))
    }
    await expect(run()).rejects.toBe(refusal)
    expect(seen).toEqual([['a'], ['b']])
  })

  it('leaving early releases the body', async () => {
    const { open, body } = responseOf([event('a'), event('b')])
    const it = translateSse(call, open, onEvent)
    await it.next()
    await it.return(undefined)
    expect(body.destroyed).toBe(true)
  })

  it('with attach, events kept beside the chunks ride on their batch, and a batch of only such events leaves', async () => {
    const { open } = responseOf([event('a') + event('skip'), event('skip'), event('b') + event('end')])
    let pending: unknown[] = []
    const step = (json: unknown): StreamStep => {
      pending.push(json)
      return (json as { text: string }).text === 'skip' ? { chunks: [] } : onEvent(json)
    }
    const attach = (batch: ChatChunk[]): boolean => {
      if (pending.length === 0) return false
      addUpstreamEvents(batch, pending)
      pending = []
      return true
    }
    const batches: [string[], unknown[] | undefined][] = []
    for await (const batch of translateSse(call, open, step, { attach })) {
      batches.push([batch.map((c) => c.choices[0]?.delta.content ?? ''), upstreamEventsOf(batch)])
    }
    expect(batches).toEqual([
      [['a'], [{ text: 'a' }]],
      [[], [{ text: 'skip' }]],
      [[], [{ text: 'skip' }]],
      [
        ['b', 'last'],
        [{ text: 'b' }, { text: 'end' }],
      ],
    ])
  })

  it('without attach, a batch carries no upstream events and chunk-less events make no batch', async () => {
    const { open } = responseOf([event('a') + event('skip'), event('skip'), event('end')])
    const step = (json: unknown): StreamStep =>
      (json as { text: string }).text === 'skip' ? { chunks: [] } : onEvent(json)
    const batches: ChatChunk[][] = []
    for await (const batch of translateSse(call, open, step)) batches.push(batch)
    expect(batches.map((b) => b.length)).toEqual([1, 1])
    expect(batches.map((b) => upstreamEventsOf(b))).toEqual([undefined, undefined])
  })
})

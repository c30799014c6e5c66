import { describe, expect, it } from 'vitest'
import { pino } from 'pino'
import { GatewayError } from '../../src/errors.ts'
import { MAX_SSE_EVENT_BYTES, SSE_DONE, SseEventTooLargeError, writeSse } from '../../src/sse.ts'
import { readSse } from '../support/sse.ts'

async function collect(parts: string[]): Promise<{ event?: string; data: string }[]> {
  const out = []
  const enc = new TextEncoder()
  async function* bytes() {
    for (const p of parts) yield enc.encode(p)
  }
  for await (const events of readSse(bytes()))
    for (const e of events) out.push({ event: e.event, data: e.data })
  return out
}

describe('readSse', () => {
  it('parses events split across arbitrary byte boundaries', async () => {
    const events = await collect([
      'data: {"a":',
      '1}\n',
      '\nevent: ping\ndata: x\n\n: comment\n\nda',
      'ta: [DONE]\n\n',
    ])
    expect(events).toEqual([
      { event: undefined, data: '{"a":1}' },
      { event: 'ping', data: 'x' },
      { event: undefined, data: '[DONE]' },
    ])
  })

  it('yields the events completed by each piece of the body together, and nothing for a piece that completes none', async () => {
    const enc = new TextEncoder()
    async function* bytes() {
      yield enc.encode('data: 1\n\ndata: 2\n\ndata: 3')
      yield enc.encode('\n')
      yield enc.encode('\n')
      yield enc.encode('data: 4\n\n')
    }
    const batches: string[][] = []
    for await (const events of readSse(bytes())) batches.push(events.map((e) => e.data))
    expect(batches).toEqual([['1', '2'], ['3'], ['4']])
  })

  it('handles CRLF framing and multi-line data', async () => {
    expect(await collect(['data: a\r\ndata: b\r\n\r\n'])).toEqual([{ event: undefined, data: 'a\nb' }])
  })

  it('drops a last event that never got its blank line (a cut stream)', async () => {
    expect(await collect(['data: 1\n\ndata: 2'])).toEqual([{ event: undefined, data: '1' }])
  })

  it('decodes multi-byte characters split between chunks', async () => {
    const bytes = new TextEncoder().encode('data: é€\n\n')
    async function* split() {
      yield bytes.slice(0, 7)
      yield bytes.slice(7)
    }
    const out = []
    for await (const events of readSse(split())) for (const e of events) out.push(e.data)
    expect(out).toEqual(['é€'])
  })

  it('ignores unknown fields and a bad retry, as the SSE spec says', async () => {
    expect(await collect(['x-proxy: 1\nretry: soon\ndata: a\n\n', 'data: b\n\n'])).toEqual([
      { event: undefined, data: 'a' },
      { event: undefined, data: 'b' },
    ])
  })

  it('throws SseEventTooLargeError when one event outgrows MAX_SSE_EVENT_BYTES, after the events before it', async () => {
    const line = `data: ${'a'.repeat(1024 * 1024)}\n`
    const parts = ['data: small\n\n', ...Array.from({ length: 9 }, () => line)]
    const seen: string[] = []
    const enc = new TextEncoder()
    async function* bytes() {
      for (const p of parts) yield enc.encode(p)
    }
    const reading = (async () => {
      for await (const events of readSse(bytes())) for (const e of events) seen.push(e.data)
    })()
    await expect(reading).rejects.toBeInstanceOf(SseEventTooLargeError)
    await expect(reading).rejects.toThrow('stream event larger than 8 MiB')
    expect(seen).toEqual(['small'])
    expect(MAX_SSE_EVENT_BYTES).toBe(8 * 1024 * 1024)
  })

  it('takes an event of many data lines just under the limit', async () => {
    const line = `data: ${'a'.repeat(1024 * 1024 - 1)}\n`
    const events = await collect([...Array.from({ length: 7 }, () => line), '\n'])
    expect(events).toHaveLength(1)
    expect(events[0]?.data.length).toBe(7 * (1024 * 1024 - 1) + 6)
  })
})

describe('writeSse', () => {
  const log = pino({ level: 'silent' })
  const write = async (events: AsyncIterable<unknown[]>, signal = new AbortController().signal) => {
    const out: string[] = []
    for await (const text of writeSse(events, { signal, requestId: 'req-1', log })) out.push(text)
    return out
  }
  async function* from<T>(values: T[], failAfter?: Error) {
    for (const v of values) yield v
    if (failAfter) throw failAfter
  }

  it('frames one JSON value per event, then the DONE marker; readSse reads back what it wrote', async () => {
    const out = await write(from([[{ a: 1 }], [{ b: 'x\ny' }]]))
    expect(out).toEqual(['data: {"a":1}\n\n', 'data: {"b":"x\\ny"}\n\n', 'data: [DONE]\n\n'])
    const back = []
    for await (const events of readSse(from(out))) for (const e of events) back.push(e.data)
    expect(back).toEqual(['{"a":1}', '{"b":"x\\ny"}', '[DONE]'])
  })

  it('writes a batch of events as one piece of text, in order, and skips empty batches', async () => {
    const out = await write(from([[{ a: 1 }, { a: 2 }, { a: 3 }], [], [{ a: 4 }]]))
    expect(out).toEqual([
      'data: {"a":1}\n\ndata: {"a":2}\n\ndata: {"a":3}\n\n',
      'data: {"a":4}\n\n',
      SSE_DONE,
    ])
  })

  it('a failure after the start is one error event in the envelope, without DONE', async () => {
    const err = new GatewayError('upstream_error', 'upstream p failed mid-stream')
    const out = await write(from([[{ a: 1 }]], err))
    expect(out).toHaveLength(2)
    expect(out[1]).toBe(
      `data: ${JSON.stringify({
        error: {
          message: 'upstream p failed mid-stream',
          type: 'upstream_error',
          code: 'upstream_error',
          param: null,
        },
        request_id: 'req-1',
      })}\n\n`,
    )
  })

  it('an unexpected error is an internal_error event that reveals nothing', async () => {
    const out = await write(from([], new Error('secret detail')))
    expect(out).toHaveLength(1)
    expect(out[0]).toContain('"code":"internal_error"')
    expect(out[0]).not.toContain('secret detail')
  })

  it('writes nothing more once the client has gone', async () => {
    const client = new AbortController()
    client.abort()
    expect(await write(from([], new Error('aborted')), client.signal)).toEqual([])
  })

  it('leaving early returns the source, so its cleanup runs', async () => {
    let cleaned = false
    async function* source() {
      try {
        yield [{ a: 1 }]
        yield [{ a: 2 }]
      } finally {
        cleaned = true
      }
    }
    const it = writeSse(source(), { signal: new AbortController().signal, requestId: 'r', log })
    await it.next()
    await it.return(undefined)
    expect(cleaned).toBe(true)
  })
})

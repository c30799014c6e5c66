import { describe, expect, it } from 'vitest'
import { MAX_SSE_EVENT_BYTES, readSse, SseEventTooLargeError, sseData, SSE_DONE } from '../../src/sse.ts'

async function collect(parts: string[]): Promise<{ event?: string; data: string }[]> {
  const out = []
  const enc = new TextEncoder()
  async function* bytes() {
    for (const p of parts) yield enc.encode(p)
  }
  for await (const e of readSse(bytes())) out.push({ event: e.event, data: e.data })
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
    for await (const e of readSse(split())) out.push(e.data)
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
      for await (const e of readSse(bytes())) seen.push(e.data)
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

describe('writing', () => {
  it('frames one JSON value per event and the DONE marker', () => {
    expect(sseData({ a: 1 })).toBe('data: {"a":1}\n\n')
    expect(SSE_DONE).toBe('data: [DONE]\n\n')
  })
})

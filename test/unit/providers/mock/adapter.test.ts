import { afterEach, describe, expect, it, vi } from 'vitest'
import { createLogger } from '../../../../src/logger.ts'
import { createMockAdapter } from '../../../../src/providers/mock/adapter.ts'
import { mockChatChunks, mockChatCompletion, mockEmbeddings } from '../../../../src/providers/mock/reply.ts'
import type { ChatRequest, UpstreamCall } from '../../../../src/providers/types.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'

const now = 1_700_000_000_000
const hello: ChatRequest = { model: 'mock/mock-chat', messages: [{ role: 'user', content: 'Hello there' }] }

function makeCall(latencyMs: number, signal: AbortSignal = new AbortController().signal): UpstreamCall {
  return {
    upstream: {
      name: 'mock',
      kind: 'mock',
      baseUrl: '',
      headers: {},
      outputLimitField: 'max_tokens',
      retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
      timeouts: { connectMs: 1000, firstByteMs: 1000, idleMs: 1000, totalMs: 1000 },
      maxResponseBytes: 1024,
      latencyMs,
    },
    upstreamModel: 'mock-chat',
    signal,
    log: createLogger('silent'),
  }
}

/** Resolves on the next check phase: after a 0 ms wait of the adapter, before any real timer. */
const nextImmediate = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

async function collect(iterable: AsyncIterable<ChatChunk[]>): Promise<ChatChunk[][]> {
  const out: ChatChunk[][] = []
  for await (const batch of iterable) out.push(batch)
  return out
}

afterEach(() => {
  vi.useRealTimers()
})

describe('createMockAdapter', () => {
  const adapter = createMockAdapter({ now: () => now })

  it('chat returns the mock completion for the upstream model', async () => {
    const res = await adapter.chat(hello, makeCall(0))
    expect(res).toEqual(mockChatCompletion(hello, 'mock-chat', now))
  })

  it('chatStream yields the mock chunks in order, one per batch', async () => {
    const batches = await collect(adapter.chatStream(hello, makeCall(1)))
    expect(batches).toEqual(mockChatChunks(hello, 'mock-chat', now).map((chunk) => [chunk]))
  })

  it('embed returns the mock embeddings', async () => {
    const req = { model: 'mock/mock-embed', input: ['a', 'b'], dimensions: 4 }
    const res = await adapter.embed?.(req, makeCall(0))
    expect(res).toEqual(mockEmbeddings(req, 'mock-chat'))
  })

  it('uses Date.now when no clock is given', async () => {
    const before = Math.floor(Date.now() / 1000)
    const res = await createMockAdapter().chat(hello, makeCall(0))
    expect(res.created).toBeGreaterThanOrEqual(before)
  })

  it('waits latencyMs before answering', async () => {
    // 0 ms still yields to the event loop once, ahead of anything scheduled after the call.
    const order: string[] = []
    const immediate = adapter.chat(hello, makeCall(0)).then(() => order.push('chat'))
    await Promise.all([immediate, nextImmediate().then(() => order.push('immediate'))])
    expect(order).toEqual(['chat', 'immediate'])

    // 5 ms: not before (on a test clock, so a busy machine cannot reorder timers).
    order.length = 0
    vi.useFakeTimers()
    const delayed = adapter.chat(hello, makeCall(5)).then(() => order.push('chat'))
    await vi.advanceTimersByTimeAsync(4)
    expect(order).toEqual([])
    await vi.advanceTimersByTimeAsync(1)
    await delayed
    expect(order).toEqual(['chat'])
  })

  it('waits latencyMs before the first chunk, and embed waits too', async () => {
    vi.useFakeTimers()
    const order: string[] = []
    const iterator = adapter.chatStream(hello, makeCall(5))[Symbol.asyncIterator]()
    const first = iterator.next().then(() => order.push('chunk'))
    const embedded = adapter.embed?.({ model: 'e', input: 'x' }, makeCall(5)).then(() => order.push('embed'))
    await vi.advanceTimersByTimeAsync(4)
    expect(order).toEqual([])
    await vi.advanceTimersByTimeAsync(1)
    await Promise.all([first, embedded])
    expect(order.sort()).toEqual(['chunk', 'embed'])
    await iterator.return?.()
  })

  it('rejects chat with the abort reason', async () => {
    const controller = new AbortController()
    const pending = adapter.chat(hello, makeCall(10_000, controller.signal))
    const reason = new Error('client went away')
    controller.abort(reason)
    await expect(pending).rejects.toBe(reason)
  })

  it('rejects with an AbortError when the signal is already aborted', async () => {
    const controller = new AbortController()
    controller.abort()
    await expect(adapter.chat(hello, makeCall(0, controller.signal))).rejects.toMatchObject({
      name: 'AbortError',
    })
    await expect(
      adapter.embed?.({ model: 'e', input: 'x' }, makeCall(0, controller.signal)),
    ).rejects.toMatchObject({ name: 'AbortError' })
  })

  it('stops a stream promptly when the signal aborts mid-stream', async () => {
    const controller = new AbortController()
    // 100 ms latency → 10 ms between chunks: the abort lands while the third chunk is being waited for.
    const iterator = adapter.chatStream(hello, makeCall(100, controller.signal))[Symbol.asyncIterator]()
    const received: ChatChunk[] = []
    for (let i = 0; i < 2; i++) {
      const next = await iterator.next()
      if (!next.done) received.push(...next.value)
    }
    const reason = new Error('client went away')
    const pending = iterator.next()
    await nextImmediate()
    controller.abort(reason)
    await expect(pending).rejects.toBe(reason)
    expect(await iterator.next()).toEqual({ done: true, value: undefined })
    expect(received).toEqual(mockChatChunks(hello, 'mock-chat', now).slice(0, 2))
  })

  it('ends a stream whose signal aborted between chunks without waiting', async () => {
    const controller = new AbortController()
    const received: ChatChunk[] = []
    const stream = adapter.chatStream(hello, makeCall(0, controller.signal))
    await expect(
      (async () => {
        for await (const batch of stream) {
          received.push(...batch)
          if (received.length === 3) controller.abort()
        }
      })(),
    ).rejects.toMatchObject({ name: 'AbortError' })
    expect(received).toHaveLength(3)
  })
})

import type { ChatRequest, ProviderAdapter, UpstreamCall } from '../types.ts'
import { finishInTurns } from '../../turns.ts'
import { mockChatChunks, mockChatCompletion, mockEmbeddingsSteps, mockReply } from './reply.ts'
import type { ChatChunk } from '../../domain/chat.ts'

export interface MockAdapterOptions {
  /** Epoch milliseconds; `created` is derived from it. */
  now?: () => number
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError')
}

/** Waits `ms` (0 → one turn of the event loop); rejects with the signal's reason once it aborts. */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(abortReason(signal))
      return
    }
    const onAbort = (): void => {
      cancel()
      reject(abortReason(signal))
    }
    const done = (): void => {
      signal.removeEventListener('abort', onAbort)
      resolve()
    }
    let cancel: () => void
    if (ms > 0) {
      const timer = setTimeout(done, ms)
      cancel = () => clearTimeout(timer)
    } else {
      const immediate = setImmediate(done)
      cancel = () => clearImmediate(immediate)
    }
    signal.addEventListener('abort', onAbort, { once: true })
  })
}

/**
 * The `mock` provider: no network, no key. Each call waits `call.upstream.latencyMs`, then answers
 * with `call.upstreamModel` as the model. A stream spaces its chunks `latencyMs / 10` apart.
 */
export function createMockAdapter(options: MockAdapterOptions = {}): ProviderAdapter {
  const now = options.now ?? Date.now

  // One chunk per batch: they come apart in time, as an upstream's reads would.
  async function* chatStream(req: ChatRequest, call: UpstreamCall): AsyncGenerator<ChatChunk[]> {
    const { latencyMs } = call.upstream
    await delay(latencyMs, call.signal)
    const reply = await finishInTurns(mockReply(req, call.upstreamModel))
    const chunks = mockChatChunks(req, call.upstreamModel, now(), reply)
    for (const [i, chunk] of chunks.entries()) {
      if (i > 0) await delay(latencyMs / 10, call.signal)
      yield [chunk]
    }
  }

  return {
    async chat(req, call) {
      await delay(call.upstream.latencyMs, call.signal)
      const reply = await finishInTurns(mockReply(req, call.upstreamModel))
      return mockChatCompletion(req, call.upstreamModel, now(), reply)
    },
    chatStream,
    async embed(req, call) {
      await delay(call.upstream.latencyMs, call.signal)
      return finishInTurns(mockEmbeddingsSteps(req, call.upstreamModel))
    },
  }
}

import { createSseParser, SseEventTooLargeError, type SseEvent } from '../../src/sse.ts'

/**
 * A byte stream's SSE events through the gateway's own parser (sse.ts `createSseParser`), yielded in the
 * batches each piece of it completes: how tests read recorded upstream streams and the gateway's own.
 * An event over MAX_SSE_EVENT_BYTES ends it with a SseEventTooLargeError, after the events before it; a
 * last event without its blank line is dropped.
 */
export async function* readSse(body: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent[]> {
  let pending: SseEvent[] = []
  let tooLarge = false
  const parser = createSseParser(
    (e) => pending.push(e),
    () => (tooLarge = true),
  )
  const decoder = new TextDecoder()
  const take = (): SseEvent[] => {
    const events = pending
    pending = []
    return events
  }
  for await (const bytes of body) {
    parser.feed(typeof bytes === 'string' ? bytes : decoder.decode(bytes, { stream: true }))
    if (tooLarge) {
      if (pending.length > 0) yield take()
      throw new SseEventTooLargeError()
    }
    if (pending.length > 0) yield take()
  }
  parser.feed(decoder.decode())
  if (pending.length > 0) yield take()
}

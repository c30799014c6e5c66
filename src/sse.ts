import { createParser, type EventSourceMessage } from 'eventsource-parser'
import { toErrorBody, toGatewayError } from './errors.ts'
import type { Logger } from './logger.ts'

// The only SSE framing code: upstream bytes → events, and Junction's chunks → bytes.

export type SseEvent = EventSourceMessage

/**
 * Largest single SSE event accepted from an upstream; a bigger one is a broken or hostile stream.
 * (Counted in decoded characters, as the parser buffers text: the same as bytes for JSON's ASCII.)
 */
export const MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024

/** What readSse throws when one event outgrows MAX_SSE_EVENT_BYTES. */
export class SseEventTooLargeError extends Error {
  constructor() {
    super(`stream event larger than ${MAX_SSE_EVENT_BYTES / 1024 / 1024} MiB`)
    this.name = 'SseEventTooLargeError'
  }
}

/**
 * Parses an SSE byte stream into events as they arrive (nothing is buffered beyond one event), yielding
 * the events completed by each piece of the body together, in order (often many: an upstream that
 * writes quickly sends several events per TCP read, and one await per piece instead of per event is
 * what keeps a stream's relay cheap). Pieces that complete no event yield nothing. An event over
 * MAX_SSE_EVENT_BYTES ends the iteration with a SseEventTooLargeError, after the events before it.
 * Unknown fields and a bad `retry` are ignored, as the SSE spec says. An upstream's stream is parsed
 * the same way by providers/exchange.ts as its pieces arrive; this reads any byte stream (a recorded
 * one, a client's view of the gateway's own).
 */
export async function* readSse(body: AsyncIterable<Uint8Array | string>): AsyncGenerator<SseEvent[]> {
  let pending: SseEvent[] = []
  let failure: Error | undefined
  const parser = createParser({
    maxBufferSize: MAX_SSE_EVENT_BYTES,
    onEvent: (e) => pending.push(e),
    onError: (err) => {
      // https://html.spec.whatwg.org/multipage/server-sent-events.html#processField: "Otherwise: the field is ignored."
      if (err.type === 'max-buffer-size-exceeded') failure = new SseEventTooLargeError()
    },
  })
  const decoder = new TextDecoder()
  const take = (): SseEvent[] => {
    const events = pending
    pending = []
    return events
  }
  for await (const bytes of body) {
    parser.feed(typeof bytes === 'string' ? bytes : decoder.decode(bytes, { stream: true }))
    if (failure) {
      if (pending.length > 0) yield take()
      throw failure
    }
    if (pending.length > 0) yield take()
  }
  parser.feed(decoder.decode())
  // A last event without its blank line is incomplete: the spec says to drop it, and so do we.
  if (pending.length > 0) yield take()
}

export const SSE_DONE = 'data: [DONE]\n\n'
export const SSE_KEEP_ALIVE = ': keep-alive\n\n'

export function sseData(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`
}

export interface WriteSseOptions {
  /** The client's signal: once it fired, nothing more is written (nobody is listening). */
  signal: AbortSignal
  requestId: string
  log: Logger
  /** An event's JSON text; JSON.stringify by default. */
  serialise?: (event: unknown) => string
}

/**
 * Junction's events → SSE text, as they arrive: each batch of events (what one upstream read produced)
 * becomes one string of `data: <json>\n\n` per event, so a batch costs one write and one turn of
 * promises however many events it holds; then `data: [DONE]\n\n`. A failure of the source after the
 * stream started is sent as one `data: {"error": …}` event in the envelope, and the stream ends without
 * [DONE]. Leaving early (the client went away) returns the source, so its own cleanup runs.
 */
export async function* writeSse(
  batches: AsyncIterable<readonly unknown[]>,
  o: WriteSseOptions,
): AsyncGenerator<string> {
  let first = true
  const serialise = o.serialise ?? JSON.stringify
  try {
    for await (const batch of batches) {
      if (batch.length === 0) continue
      let text = ''
      for (const event of batch) text += `data: ${serialise(event)}\n\n`
      yield text
      // The response socket is corked until the next tick; when the upstream's data is already
      // buffered, the promise chain would translate every buffered batch before that tick comes.
      // One turn of the event loop after the first batch puts it on the wire at once.
      if (first) {
        first = false
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    yield SSE_DONE
  } catch (err) {
    if (o.signal.aborted) return
    const e = toGatewayError(err)
    o.log.warn({ err, status: e.status, code: e.code }, 'stream failed after it started')
    yield sseData(toErrorBody(e, o.requestId))
  }
}

/** One event with its name, as Anthropic's streams frame them: `event: <type>\ndata: <json>\n\n`. */
export function sseNamedEvent(type: string, value: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(value)}\n\n`
}

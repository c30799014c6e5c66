import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser'
import { toErrorBody, toGatewayError } from './errors.ts'
import type { Logger } from './logger.ts'

// The only SSE framing code: upstream bytes → events (createSseParser), and Junction's chunks → bytes.

export type SseEvent = EventSourceMessage

/**
 * Largest single SSE event accepted from an upstream; a bigger one is a broken or hostile stream.
 * (Counted in decoded characters, as the parser buffers text: the same as bytes for JSON's ASCII.)
 */
export const MAX_SSE_EVENT_BYTES = 8 * 1024 * 1024

/** What ends an upstream stream whose event outgrows MAX_SSE_EVENT_BYTES. */
export class SseEventTooLargeError extends Error {
  constructor() {
    super(`stream event larger than ${MAX_SSE_EVENT_BYTES / 1024 / 1024} MiB`)
    this.name = 'SseEventTooLargeError'
  }
}

/**
 * The SSE parser of every upstream stream (providers/exchange.ts feeds it as the body's pieces arrive):
 * each complete event to `onEvent`; `onTooLarge` once an event outgrows MAX_SSE_EVENT_BYTES (the caller
 * ends the stream with a SseEventTooLargeError). Unknown fields and a bad `retry` are ignored, as the SSE
 * spec says; a last event without its blank line is never complete, so never handed over.
 */
export function createSseParser(
  onEvent: (event: SseEvent) => void,
  onTooLarge: () => void,
): EventSourceParser {
  return createParser({
    maxBufferSize: MAX_SSE_EVENT_BYTES,
    onEvent,
    onError: (err) => {
      // https://html.spec.whatwg.org/multipage/server-sent-events.html#processField: "Otherwise: the field is ignored."
      if (err.type === 'max-buffer-size-exceeded') onTooLarge()
    },
  })
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

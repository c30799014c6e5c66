import type { GatewayError } from '../../errors.ts'
import { SseEventTooLargeError } from '../../sse.ts'
import { exchangeJson, openSse, type ErrorAnswer, type SseEvents } from '../exchange.ts'
import { fromNetworkError, headerValue, malformedUpstream } from '../http.ts'
import type { UpstreamCall } from '../types.ts'
import { carriesAnswer } from './stream.ts'
import type { ChatChunk } from '../../domain/chat.ts'

export type { SseEvents }

// The I/O every protocol's adapter.ts does the same way: a post whose error status becomes the
// protocol's GatewayError, and the loop over a stream of JSON events. The protocol passes in what
// differs (its URL and headers, its error mapper, what it makes of one event).

/** A protocol's mapping of an upstream HTTP error (status, body text, Retry-After) to a GatewayError. */
export type UpstreamErrorMapper = (
  provider: string,
  status: number,
  body: string,
  retryAfter: string | undefined,
  secrets: (string | undefined)[],
) => GatewayError

/**
 * Posts to the upstream and returns the JSON of a 2xx answer, read whole (`exchangeJson`). Any other
 * status: logs it and throws what `mapError` makes of it, from the first 64 KiB of its body (the
 * upstream key is passed as a secret to scrub from any message).
 */
export async function postJsonChecked(
  call: UpstreamCall,
  url: string,
  headers: Record<string, string>,
  payload: unknown,
  mapError: UpstreamErrorMapper,
): Promise<unknown> {
  return requestJsonChecked(call, 'POST', url, headers, payload, mapError)
}

/** `postJsonChecked` for any method (media adapters poll with GET and cancel with POST or DELETE). */
export async function requestJsonChecked(
  call: UpstreamCall,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  headers: Record<string, string>,
  payload: unknown,
  mapError: UpstreamErrorMapper,
): Promise<unknown> {
  const answer = await exchangeJson(call, method, url, headers, payload)
  if (answer.ok) return answer.json
  throw mappedError(call, answer.status, answer.text, answer.headers, mapError)
}

/** `postJsonChecked` for a stream: a 2xx answer's events as they come (`openSse`). */
export async function postSseChecked(
  call: UpstreamCall,
  url: string,
  headers: Record<string, string>,
  payload: unknown,
  mapError: UpstreamErrorMapper,
): Promise<SseEvents> {
  const answer = await openSse(call, 'POST', url, headers, payload)
  if (answer.ok) return answer.events
  throw mappedError(call, answer.status, answer.text, answer.headers, mapError)
}

function mappedError(
  call: UpstreamCall,
  status: number,
  text: string,
  headers: ErrorAnswer['headers'],
  mapError: UpstreamErrorMapper,
): GatewayError {
  call.log.warn({ provider: call.upstream.name, status }, 'upstream returned an error')
  return mapError(call.upstream.name, status, text, headerValue(headers, 'retry-after'), [
    call.upstream.apiKey,
  ])
}

/** What a protocol makes of one stream event: the chunks to send on, and whether it ends the stream. */
export interface StreamStep {
  chunks: readonly ChatChunk[]
  last?: boolean
}

/** How a protocol's stream ends, for {@link translateSse}. */
export interface SseEnd {
  /** Data that ends the stream when it is an event's whole data (OpenAI's `[DONE]`). */
  marker?: string
  /**
   * Called once the body has ended without an error: `marked` is true when it ended on the protocol's
   * own end marker (`marker`, or a step marked `last`), false when the body simply ran out. Returns
   * the chunks still to send, or throws when the answer is incomplete.
   */
  onEnd?: (marked: boolean) => readonly ChatChunk[]
  /**
   * Attaches what the protocol keeps beside the chunks (its raw events, see UPSTREAM_EVENTS) to a
   * batch about to leave; true when there was some, so that a batch without chunks leaves too.
   */
  attach?: (batch: ChatChunk[]) => boolean
  /**
   * Translates an event from its data's text without parsing it, when it can (the chunk, or undefined:
   * the event is then parsed and given to `onEvent` as usual).
   */
  fromText?: (data: string) => ChatChunk | undefined
}

/**
 * A protocol's chat stream: `open` makes the upstream call (on the first read, so a request that cannot
 * be translated throws before anything is sent upstream) and returns the SSE body, whose events'
 * data are parsed as JSON (a 502 when it is not) and given to `onEvent`. The chunks are yielded in
 * batches: up to the first chunk that carries some of the answer, each event's on its own; after it,
 * all those of one piece of the body together (one turn of promises per upstream read, not per chunk:
 * a stream has hundreds of chunks, and a fast upstream sends many per read). Errors
 * `onEvent` and `onEnd` throw pass as they are, after the chunks before them; network failures become
 * GatewayErrors. Leaving before the end (client gone, an error) releases the upstream connection at
 * once.
 *
 * The adapter returns this generator itself rather than delegating to it with `yield*`: every layer
 * of async generators costs each batch another turn of promises.
 */
export async function* translateSse(
  call: UpstreamCall,
  open: () => Promise<SseEvents>,
  onEvent: (json: unknown, data: string) => StreamStep,
  end: SseEnd = {},
): AsyncGenerator<ChatChunk[]> {
  const events = await open()
  let marked = false
  let finished = false
  let answering = false
  let batch: ChatChunk[] = []
  const take = (): ChatChunk[] => {
    const ready = batch
    end.attach?.(ready)
    batch = []
    return ready
  }
  /** A batch is ready: it has chunks, or (with `attach`) events kept beside them. */
  const ready = (): boolean => batch.length > 0 || (end.attach?.(batch) ?? false)
  try {
    read: for await (const piece of events) {
      for (const sse of piece) {
        if (end.marker !== undefined && sse.data === end.marker) {
          marked = true
          break read
        }
        const fast = end.fromText?.(sse.data)
        if (fast !== undefined) batch.push(fast)
        else {
          let json: unknown
          try {
            json = JSON.parse(sse.data)
          } catch (err) {
            throw malformedUpstream(call, 'stream event is not valid JSON', err)
          }
          const step = onEvent(json, sse.data)
          for (const chunk of step.chunks) batch.push(chunk)
          if (step.last) {
            marked = true
            break read
          }
        }
        // Up to the answer's first output each event's chunks leave at once, so the first token
        // reaches the client without waiting for the rest of the read (often the whole answer).
        if (!answering && batch.length > 0) {
          answering = batch.some(carriesAnswer)
          yield take()
        }
      }
      if (ready()) yield take()
    }
    finished = true
  } catch (err) {
    // What was translated before the failure goes first; the error follows on the next read.
    if (ready()) yield take()
    if (err instanceof SseEventTooLargeError) throw malformedUpstream(call, err.message, err)
    throw fromNetworkError(err, call)
  } finally {
    if (!finished) events.close()
  }
  if (end.onEnd) for (const chunk of end.onEnd(marked)) batch.push(chunk)
  if (ready()) yield take()
}

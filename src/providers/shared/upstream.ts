import type { GatewayError } from '../../errors.ts'
import { readSse, SseEventTooLargeError } from '../../sse.ts'
import {
  fromNetworkError,
  headerValue,
  malformedUpstream,
  readLimited,
  requestUpstream,
  type UpstreamResponse,
} from '../http.ts'
import type { ChatChunk, UpstreamCall } from '../types.ts'

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
 * Posts to the upstream and returns a 2xx response. Any other status: reads at most 64 KiB of the
 * body, logs the status and throws what `mapError` makes of it (the upstream key is passed as a
 * secret to scrub from any message).
 */
export async function postChecked(
  call: UpstreamCall,
  url: string,
  headers: Record<string, string>,
  payload: unknown,
  mapError: UpstreamErrorMapper,
): Promise<UpstreamResponse> {
  return requestChecked(call, 'POST', url, headers, payload, mapError)
}

/** `postChecked` for any method (media adapters poll with GET and cancel with POST or DELETE). */
export async function requestChecked(
  call: UpstreamCall,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  headers: Record<string, string>,
  payload: unknown,
  mapError: UpstreamErrorMapper,
): Promise<UpstreamResponse> {
  const res = await requestUpstream(call, method, url, headers, payload)
  if (res.status >= 200 && res.status < 300) return res
  let text = ''
  try {
    text = await readLimited(res.body)
  } catch {
    // The status alone decides the mapping.
  }
  call.log.warn({ provider: call.upstream.name, status: res.status }, 'upstream returned an error')
  throw mapError(call.upstream.name, res.status, text, headerValue(res.headers, 'retry-after'), [
    call.upstream.apiKey,
  ])
}

/** What a protocol makes of one stream event: the chunks to send on, and whether it ends the stream. */
export interface StreamStep {
  chunks: readonly ChatChunk[]
  last?: boolean
}

/**
 * Reads an upstream SSE body: each event's data is parsed as JSON (a 502 when it is not) and given to
 * `onEvent`, whose chunks are yielded. Errors `onEvent` throws pass as they are; network failures
 * become GatewayErrors. Returns true when the stream ended on the protocol's own end marker (`endMarker`
 * as the whole data, or a step marked `last`), false when the body simply ran out. Leaving before the
 * end (client gone, an error) releases the upstream connection at once.
 */
export async function* translateSse(
  call: UpstreamCall,
  body: UpstreamResponse['body'],
  onEvent: (json: unknown) => StreamStep,
  endMarker?: string,
): AsyncGenerator<ChatChunk, boolean> {
  let marked = false
  let finished = false
  try {
    for await (const sse of readSse(body)) {
      if (endMarker !== undefined && sse.data === endMarker) {
        marked = true
        break
      }
      let json: unknown
      try {
        json = JSON.parse(sse.data)
      } catch (err) {
        throw malformedUpstream(call, 'stream event is not valid JSON', err)
      }
      const step = onEvent(json)
      for (const chunk of step.chunks) yield chunk
      if (step.last) {
        marked = true
        break
      }
    }
    finished = true
  } catch (err) {
    if (err instanceof SseEventTooLargeError) throw malformedUpstream(call, err.message, err)
    throw fromNetworkError(err, call)
  } finally {
    if (!finished) body.destroy()
  }
  return marked
}

import { pipeline, type Readable, type Transform } from 'node:stream'
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib'
import { errors as undiciErrors, request } from 'undici'
import { GatewayError, UpstreamError } from '../errors.ts'
import type { UpstreamCall } from './types.ts'

// The one place adapters do HTTP, with exchange.ts (the calls whose answer is JSON or a stream of
// events go through it; requestUpstream is for downloads). Timeouts: connect is set on the pool
// (registry.ts), first byte and idle per request here, and the total (request sent → body read,
// streams included) by a timer here, so every protocol folder gets the same behaviour.

export interface UpstreamResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  /** Decompressed when the upstream compressed it; fails with a 504 when the call's total time is up. */
  body: Readable
}

export async function postUpstream(
  call: UpstreamCall,
  url: string,
  headers: Record<string, string>,
  payload: unknown,
): Promise<UpstreamResponse> {
  return requestUpstream(call, 'POST', url, headers, payload)
}

/**
 * One upstream call: a JSON body for POST (none for GET or DELETE), the same timeouts, tracing and
 * decompression for every method. Media adapters poll with GET and cancel with POST or DELETE.
 */
export async function requestUpstream(
  call: UpstreamCall,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  headers: Record<string, string>,
  payload?: unknown,
): Promise<UpstreamResponse> {
  const deadline = startDeadline(call)
  try {
    const sent = payload === undefined ? undefined : upstreamBody(payload)
    const res = await request(url, {
      method,
      dispatcher: call.dispatcher,
      headers: requestHeaders(call, headers, sent),
      // undici takes iterables (its documentation says so; its types do not list them).
      body: sent as Buffer | undefined,
      signal: deadline.signal,
      headersTimeout: call.upstream.timeouts.firstByteMs,
      bodyTimeout: call.upstream.timeouts.idleMs,
    })
    // The body is done however it ends (read, failed, dropped): that is when the call is.
    res.body.once('close', deadline.clear)
    call.onFirstByte?.()
    const body = decodeBody(res.body, headerValue(res.headers, 'content-encoding'))
    if (body === undefined && res.statusCode >= 200 && res.statusCode < 300) {
      // Unread, the body is dropped with its connection (undici then fails it: nobody is listening).
      res.body.on('error', () => {}).destroy()
      throw malformedUpstream(call, `unsupported content-encoding ${describeEncoding(res.headers)}`)
    }
    // An error answer in an unknown encoding is still mapped by its status; its text is lost.
    return { status: res.statusCode, headers: res.headers, body: body ?? res.body }
  } catch (err) {
    deadline.clear()
    throw fromNetworkError(err, call)
  }
}

/** Of an error answer, this many bytes are read; the rest is not (its connection is dropped). */
export const ERROR_TEXT_BYTES = 64 * 1024

/**
 * An upstream request's headers: the JSON content type when it has a body, the upstream's configured
 * headers, the protocol's, the trace context, and a ReleasedBody's length (undici cannot know it).
 */
export function requestHeaders(
  call: UpstreamCall,
  headers: Record<string, string>,
  sent: Buffer | ReleasedBody | undefined,
): Record<string, string> {
  return {
    ...(sent === undefined ? {} : { 'content-type': 'application/json' }),
    ...call.upstream.headers,
    ...headers,
    ...(call.traceparent ? { traceparent: call.traceparent } : {}),
    ...(sent instanceof ReleasedBody ? { 'content-length': String(sent.length) } : {}),
  }
}

/** Bodies of at least this many characters go to undici as a ReleasedBody. */
export const RELEASED_BODY_BYTES = 16 * 1024

/**
 * A request body undici lets go of once it is written. undici keeps a Buffer body until the answer
 * has ended (a string one too, with the Buffer it makes of it): for a stream, its whole life, so every
 * open stream held its prompt's JSON twice over (a coding agent's prompt is 50-200 KB). An iterable
 * body is read once and not kept: this one gives its text and forgets it, and the socket writes the
 * text itself (no Buffer is made of it, whose bytes would wait outside the heap for a collection).
 * Small bodies stay Buffers: the iterable costs undici a few promises.
 */
export class ReleasedBody implements Iterable<string> {
  #text: string | undefined
  /** In bytes: the content-length. */
  readonly length: number
  constructor(text: string) {
    this.#text = text
    this.length = Buffer.byteLength(text)
  }
  *[Symbol.iterator](): Iterator<string> {
    const text = this.#text
    this.#text = undefined
    if (text !== undefined) yield text
  }
}

/** The JSON body as undici is given it: a Buffer, or a ReleasedBody from RELEASED_BODY_BYTES on. */
export function upstreamBody(payload: unknown): Buffer | ReleasedBody {
  const text = JSON.stringify(payload)
  return text.length < RELEASED_BODY_BYTES ? Buffer.from(text) : new ReleasedBody(text)
}

/**
 * The call's signal, also aborted once `timeouts.totalMs` has passed: with an UpstreamError as
 * the reason, which the request (or its body) then fails with, where a client gone away aborts
 * with its own reason. `clear` must run when the call ends, so that no timer outlives it.
 */
function startDeadline(call: UpstreamCall): { signal: AbortSignal; clear: () => void } {
  const { name, timeouts } = call.upstream
  // One controller fed by both causes (AbortSignal.any costs more on every call).
  const combined = new AbortController()
  const onClientGone = (): void => combined.abort(call.signal.reason)
  if (call.signal.aborted) onClientGone()
  else call.signal.addEventListener('abort', onClientGone, { once: true })
  const timer = setTimeout(() => {
    combined.abort(
      new UpstreamError('upstream_timeout', `upstream ${name} timed out (total)`, {
        provider: name,
        retryable: true,
      }),
    )
  }, timeouts.totalMs)
  return {
    signal: combined.signal,
    clear: () => {
      clearTimeout(timer)
      call.signal.removeEventListener('abort', onClientGone)
    },
  }
}

/** The decoders of a body read as it arrives (exchange.ts has those of one read whole). */
export const streamDecoders: Record<string, () => Transform> = {
  gzip: createGunzip,
  'x-gzip': createGunzip,
  // HTTP's deflate is the zlib format (RFC 9110 §8.4.1.2).
  deflate: createInflate,
  br: createBrotliDecompress,
}

/**
 * The body as the upstream meant it: a compressed one (a proxy in front of an OpenAI-compatible
 * server may compress) is decompressed as it arrives, so size limits apply to what is parsed.
 * Undefined for an encoding Junction does not decode. Destroying the result destroys the body.
 */
function decodeBody(body: Readable, encoding: string | undefined): Readable | undefined {
  const coding = (encoding ?? '').trim().toLowerCase()
  if (coding === '' || coding === 'identity') return body
  const create = Object.hasOwn(streamDecoders, coding) ? streamDecoders[coding] : undefined
  if (!create) return undefined
  // An error of either stream fails the decoded one with that same error (a deadline's included).
  return pipeline(body, create(), () => {})
}

export function describeEncoding(headers: UpstreamResponse['headers']): string {
  const value = headerValue(headers, 'content-encoding') ?? ''
  // The header is the upstream's text going into a client's message: only a plain token is named.
  return /^[\w.+, -]{1,40}$/.test(value) ? value.trim() : '(unreadable)'
}

/**
 * Reads at most `limit` bytes of an (error) body as text; the rest is not read (the connection is
 * dropped instead, so an endless error body cannot hold it).
 */
export async function readLimited(
  body: AsyncIterable<Uint8Array>,
  limit = ERROR_TEXT_BYTES,
): Promise<string> {
  const parts: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    const b = Buffer.from(chunk)
    parts.push(b.subarray(0, limit - size))
    size += b.length
    // Leaving the loop destroys the body.
    if (size >= limit) break
  }
  return Buffer.concat(parts).toString('utf8')
}

/**
 * Reads a binary body (a generated image, video or audio file) of at most `limit` bytes; a longer one
 * is not read further and is the upstream's fault (502).
 */
export async function readBytes(
  call: UpstreamCall,
  body: UpstreamResponse['body'],
  limit: number,
): Promise<Buffer> {
  const parts: Buffer[] = []
  let size = 0
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      size += chunk.length
      // Leaving the loop destroys the body: the upstream connection is dropped, not drained.
      if (size > limit) throw malformedUpstream(call, `output larger than ${limit} bytes`)
      parts.push(chunk)
    }
  } catch (err) {
    throw fromNetworkError(err, call)
  }
  return Buffer.concat(parts)
}

export function malformedUpstream(call: UpstreamCall, what: string, cause?: unknown): UpstreamError {
  return new UpstreamError('upstream_error', `upstream ${call.upstream.name}: ${what}`, {
    provider: call.upstream.name,
    upstreamStatus: 200,
    retryable: true,
    cause,
  })
}

const timeoutCodes = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/** Node's zlib error codes: Z_DATA_ERROR… (gzip, deflate), ERR__ERROR_FORMAT_… (brotli). */
const decompressionCodes = /^(?:Z_|ERR__ERROR_)/

/**
 * Network-level failures. A request aborted because the client went away is re-thrown unchanged:
 * the route knows its own signal and records a cancellation, not an upstream fault.
 */
export function fromNetworkError(err: unknown, call: UpstreamCall): unknown {
  if (err instanceof GatewayError) return err
  if (call.signal.aborted) return err
  const code = (err as { code?: string }).code ?? ''
  const name = call.upstream.name
  if (timeoutCodes.has(code) || err instanceof undiciErrors.ConnectTimeoutError) {
    const phase =
      code === 'UND_ERR_CONNECT_TIMEOUT'
        ? 'connect'
        : code === 'UND_ERR_HEADERS_TIMEOUT'
          ? 'first byte'
          : 'idle'
    return new UpstreamError('upstream_timeout', `upstream ${name} timed out (${phase})`, {
      provider: name,
      retryable: true,
      cause: err,
    })
  }
  if (decompressionCodes.test(code)) {
    return malformedUpstream(call, `response body could not be decompressed (${code})`, err)
  }
  return new UpstreamError(
    'upstream_error',
    `upstream ${name} connection failed (${code || 'network error'})`,
    {
      provider: name,
      retryable: true,
      cause: err,
    },
  )
}

const secretPatterns: [RegExp, string][] = [
  [/\b(?:sk|pk|rk|gsk|xai|AIza)[-_A-Za-z0-9]{8,}/g, '[redacted]'],
  [/\bBearer\s+[^\s"']+/gi, 'Bearer [redacted]'],
  [/([?&](?:key|api_key|apikey|token)=)[^&\s"']+/gi, '$1[redacted]'],
]

/** Removes anything that looks like a credential from a provider's message before a client sees it. */
export function scrubSecrets(text: string, known: (string | undefined)[] = []): string {
  let out = text
  for (const k of known) if (k && k.length >= 4) out = out.split(k).join('[redacted]')
  for (const [pattern, replacement] of secretPatterns) out = out.replace(pattern, replacement)
  return out.length > 500 ? `${out.slice(0, 500)}…` : out
}

export function headerValue(headers: UpstreamResponse['headers'], name: string): string | undefined {
  const v = headers[name]
  return Array.isArray(v) ? v[0] : v
}

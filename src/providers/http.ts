import type { IncomingHttpHeaders } from 'node:http'
import { pipeline, type Readable, type Transform } from 'node:stream'
import {
  brotliDecompress,
  createBrotliDecompress,
  createGunzip,
  createInflate,
  gunzip,
  inflate,
  type InputType,
} from 'node:zlib'
import { errors as undiciErrors, getGlobalDispatcher, request, type Dispatcher } from 'undici'
import { GatewayError, UpstreamError } from '../errors.ts'
import type { UpstreamCall } from './types.ts'

// The one place adapters do HTTP. Timeouts: connect is set on the pool (registry.ts), first byte and
// idle per request here, and the total (request sent → body read, streams included) by a timer
// here, so every protocol folder gets the same behaviour.

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
      headers: {
        ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
        ...call.upstream.headers,
        ...headers,
        ...(call.traceparent ? { traceparent: call.traceparent } : {}),
        ...(sent instanceof ReleasedBody ? { 'content-length': String(sent.length) } : {}),
      },
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

/** An upstream's answer read whole: a 2xx one's JSON, another's text (its first ERROR_TEXT_BYTES). */
export type JsonAnswer =
  | { ok: true; status: number; headers: UpstreamResponse['headers']; json: unknown }
  | { ok: false; status: number; headers: UpstreamResponse['headers']; text: string }

/** Of an error answer, this many bytes are read; the rest is not (its connection is dropped). */
export const ERROR_TEXT_BYTES = 64 * 1024

/**
 * One upstream call whose answer is read whole (every blocking answer): `requestUpstream`'s timeouts,
 * headers and limits, a 2xx answer parsed as JSON (at most `maxResponseBytes`, decompressed), another
 * read as text. Through undici's dispatch rather than its `request`: no body stream, no signal of its
 * own and no async resource for an answer that is gathered whole anyway (18 µs of the event loop's
 * time a blocking request, a tenth of it, measured against `request` and `readJson`).
 */
export function exchangeJson(
  call: UpstreamCall,
  method: 'GET' | 'POST' | 'DELETE',
  url: string,
  headers: Record<string, string>,
  payload?: unknown,
): Promise<JsonAnswer> {
  return new Promise((resolve, reject) =>
    new JsonExchange(call, resolve, reject).start(method, url, headers, payload),
  )
}

type OneShotDecoder = (
  input: InputType,
  options: { maxOutputLength: number },
  done: (err: Error | null, out: Buffer) => void,
) => void

/** The decoders of a body read whole, as `decoders` for one read as it arrives. */
const wholeDecoders: Record<string, OneShotDecoder> = {
  gzip: gunzip,
  'x-gzip': gunzip,
  deflate: inflate,
  br: brotliDecompress,
}

/** A URL's origin and path as undici's dispatch takes them, kept per URL (each upstream has a few). */
const splitUrls = new Map<string, { origin: string; path: string }>()

function splitUrl(url: string): { origin: string; path: string } {
  let split = splitUrls.get(url)
  if (!split) {
    const u = new URL(url)
    split = { origin: u.origin, path: `${u.pathname}${u.search}` }
    // Bounded: a URL may carry a varying part (a prediction's id).
    if (splitUrls.size >= 1_000) splitUrls.clear()
    splitUrls.set(url, split)
  }
  return split
}

/** One `exchangeJson` call: undici's handler of its answer. A class, not a literal with closures per call. */
class JsonExchange implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined
  /** Why the call was given up before undici started it: told to undici when it does. */
  private abandoned: Error | undefined
  private settled = false
  private status = 0
  private headers: IncomingHttpHeaders = {}
  /** The answer's content-coding to undo ('' for none). */
  private coding = ''
  private limit = 0
  private parts: Buffer[] = []
  private size = 0
  private timer: NodeJS.Timeout | undefined
  private readonly call: UpstreamCall
  private readonly resolve: (answer: JsonAnswer) => void
  private readonly reject: (err: unknown) => void

  constructor(call: UpstreamCall, resolve: (answer: JsonAnswer) => void, reject: (err: unknown) => void) {
    this.call = call
    this.resolve = resolve
    this.reject = reject
  }

  start(method: string, url: string, headers: Record<string, string>, payload: unknown): void {
    const { call } = this
    if (call.signal.aborted) {
      this.reject(call.signal.reason)
      return
    }
    try {
      const sent = payload === undefined ? undefined : upstreamBody(payload)
      const { origin, path } = splitUrl(url)
      call.signal.addEventListener('abort', this.clientGone, { once: true })
      this.timer = setTimeout(this.timedOut, call.upstream.timeouts.totalMs)
      ;(call.dispatcher ?? getGlobalDispatcher()).dispatch(
        {
          origin,
          path,
          method: method as Dispatcher.HttpMethod,
          headers: {
            ...(payload === undefined ? {} : { 'content-type': 'application/json' }),
            ...call.upstream.headers,
            ...headers,
            ...(call.traceparent ? { traceparent: call.traceparent } : {}),
            ...(sent instanceof ReleasedBody ? { 'content-length': String(sent.length) } : {}),
          },
          body: sent as Buffer | undefined,
          headersTimeout: call.upstream.timeouts.firstByteMs,
          bodyTimeout: call.upstream.timeouts.idleMs,
        },
        this,
      )
    } catch (err) {
      this.fail(fromNetworkError(err, call))
    }
  }

  private readonly clientGone = (): void => this.abort(this.call.signal.reason as Error)

  private readonly timedOut = (): void => {
    const { name } = this.call.upstream
    this.abort(
      new UpstreamError('upstream_timeout', `upstream ${name} timed out (total)`, {
        provider: name,
        retryable: true,
      }),
    )
  }

  /** Gives the call up: its caller gets `reason` (as `requestUpstream`'s would), undici drops the connection. */
  private abort(reason: Error): void {
    if (this.settled) return
    this.fail(fromNetworkError(reason, this.call))
    if (this.controller) this.controller.abort(reason)
    else this.abandoned = reason
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.abandoned) controller.abort(this.abandoned)
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHttpHeaders,
  ): void {
    // An informational answer (100 Continue): the real one follows.
    if (statusCode < 200 || this.settled) return
    this.status = statusCode
    this.headers = headers
    this.call.onFirstByte?.()
    const ok = this.isOk()
    const coding = (headerValue(headers, 'content-encoding') ?? '').trim().toLowerCase()
    this.coding = coding === 'identity' ? '' : coding
    if (this.coding !== '' && !Object.hasOwn(wholeDecoders, this.coding)) {
      if (ok) {
        this.abort(malformedUpstream(this.call, `unsupported content-encoding ${describeEncoding(headers)}`))
        return
      }
      // An error answer in an unknown encoding is still mapped by its status (its text as it came).
      this.coding = ''
    }
    this.limit = ok ? this.call.upstream.maxResponseBytes : ERROR_TEXT_BYTES
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return
    if (this.size + chunk.length <= this.limit) {
      this.parts.push(chunk)
      this.size += chunk.length
      return
    }
    if (this.isOk()) {
      // Not read further: the upstream connection is dropped, not drained.
      this.abort(malformedUpstream(this.call, `response larger than ${this.limit} bytes`))
      return
    }
    // An error answer: its first ERROR_TEXT_BYTES are enough to map it, the rest is not read.
    this.parts.push(chunk.subarray(0, this.limit - this.size))
    this.size = this.limit
    this.finish()
    controller.abort(new Error('upstream error answer not read past its first bytes'))
  }

  onResponseEnd(): void {
    this.finish()
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.fail(fromNetworkError(err, this.call))
  }

  private isOk(): boolean {
    return this.status >= 200 && this.status < 300
  }

  /** Stops the timer and the client's listener: the call is over. */
  private over(): void {
    this.settled = true
    clearTimeout(this.timer)
    this.call.signal.removeEventListener('abort', this.clientGone)
  }

  private fail(err: unknown): void {
    if (this.settled) return
    this.over()
    this.reject(err)
  }

  private finish(): void {
    if (this.settled) return
    this.over()
    const bytes = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.size)
    this.parts = []
    if (this.coding === '') {
      this.answer(bytes)
      return
    }
    wholeDecoders[this.coding]!(bytes, { maxOutputLength: this.limit }, (err, out) => {
      if (!err) this.answer(out)
      else if (!this.isOk()) this.answer(Buffer.alloc(0))
      else if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
        this.reject(malformedUpstream(this.call, `response larger than ${this.limit} bytes`))
      } else this.reject(fromNetworkError(err, this.call))
    })
  }

  private answer(bytes: Buffer): void {
    const { status, headers } = this
    const text = bytes.toString('utf8')
    if (!this.isOk()) {
      this.resolve({ ok: false, status, headers, text })
      return
    }
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch (err) {
      this.reject(malformedUpstream(this.call, 'response body is not valid JSON', err))
      return
    }
    this.resolve({ ok: true, status, headers, json })
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

const decoders: Record<string, () => Transform> = {
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
  const create = Object.hasOwn(decoders, coding) ? decoders[coding] : undefined
  if (!create) return undefined
  // An error of either stream fails the decoded one with that same error (a deadline's included).
  return pipeline(body, create(), () => {})
}

function describeEncoding(headers: UpstreamResponse['headers']): string {
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

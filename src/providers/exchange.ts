import type { IncomingHttpHeaders } from 'node:http'
import type { Transform } from 'node:stream'
import { TextDecoder } from 'node:util'
import { brotliDecompress, gunzip, inflate, type InputType } from 'node:zlib'
import type { EventSourceParser } from 'eventsource-parser'
import { getGlobalDispatcher, type Dispatcher } from 'undici'
import { UpstreamError } from '../errors.ts'
import { createSseParser, SseEventTooLargeError, type SseEvent } from '../sse.ts'
import {
  describeEncoding,
  ERROR_TEXT_BYTES,
  fromNetworkError,
  headerValue,
  malformedUpstream,
  requestHeaders,
  streamDecoders,
  upstreamBody,
  type UpstreamResponse,
} from './http.ts'
import type { UpstreamCall } from './types.ts'

// Upstream calls through undici's dispatch, with a handler of our own rather than undici's `request`
// and the body stream it makes: a blocking answer gathered whole (exchangeJson), a stream's events as
// they are parsed (openSse). No body stream, no signal of its own, no async resource per call: that
// was 10-20 µs of a blocking request's CPU and ≈50 µs of a 100-chunk stream's (docs/benchmarks.md,
// twelfth round), and what a request left in the old generation. The timeouts, headers,
// limits, decoding and errors are requestUpstream's (http.ts): first byte and idle by undici, the
// total by a timer here, the client gone by its signal; either gives the call up and drops its
// connection. An error answer (not 2xx) is read up to ERROR_TEXT_BYTES and returned as text, for
// the protocol to map.

type Headers = UpstreamResponse['headers']

/** An error answer: its status, headers and the first ERROR_TEXT_BYTES of its body, decoded. */
export interface ErrorAnswer {
  ok: false
  status: number
  headers: Headers
  text: string
}

/** An upstream's answer read whole: a 2xx one's JSON, or an error answer. */
export type JsonAnswer = { ok: true; status: number; headers: Headers; json: unknown } | ErrorAnswer

/** A 2xx stream's events, in batches: those parsed while the reader was busy go to it together. */
export interface SseEvents extends AsyncIterableIterator<SseEvent[]> {
  /** Drops the upstream connection, unless the stream has ended: the caller is done with it. */
  close(): void
}

/** An upstream's answer to a streamed call: a 2xx one's events as they come, or an error answer. */
export type SseAnswer = { ok: true; status: number; headers: Headers; events: SseEvents } | ErrorAnswer

/**
 * One upstream call whose answer is read whole (every blocking answer): a 2xx answer parsed as JSON
 * (at most `maxResponseBytes`, decompressed), another read as text.
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

/**
 * One streamed upstream call: resolves once the answer's headers came, a 2xx answer with its events
 * (parsed as they arrive, decompressed first when compressed), another with its text. The events'
 * reader sets the pace: once 64 KiB of events wait for it, the upstream connection is not read. An event
 * over MAX_SSE_EVENT_BYTES ends the events with a SseEventTooLargeError, after those before it.
 */
export function openSse(
  call: UpstreamCall,
  method: 'GET' | 'POST',
  url: string,
  headers: Record<string, string>,
  payload?: unknown,
): Promise<SseAnswer> {
  return new Promise((resolve, reject) =>
    new SseExchange(call, resolve, reject).start(method, url, headers, payload),
  )
}

type OneShotDecoder = (
  input: InputType,
  options: { maxOutputLength: number },
  done: (err: Error | null, out: Buffer) => void,
) => void

/** The decoders of a body read whole, as http.ts `streamDecoders` for one read as it arrives. */
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

/**
 * What both exchanges share: the request, its deadline and the client's signal, the answer's status,
 * headers and content-coding, and an error answer's text. Classes rather than literals with closures:
 * one object a call.
 */
abstract class Exchange<Ok> implements Dispatcher.DispatchHandler {
  protected controller: Dispatcher.DispatchController | undefined
  /** Why the call was given up before undici started it: told to undici when it does. */
  private abandoned: Error | undefined
  /** The call is over for its caller: answered, failed or given up. */
  protected settled = false
  protected status = 0
  protected headers: IncomingHttpHeaders = {}
  /** The answer's content-coding to undo ('' for none). */
  protected coding = ''
  /** The body's bytes so far, of an answer read whole (a JSON answer, an error answer). */
  private parts: Buffer[] = []
  private size = 0
  private timer: NodeJS.Timeout | undefined
  protected readonly call: UpstreamCall
  protected readonly resolve: (answer: Ok | ErrorAnswer) => void
  protected readonly reject: (err: unknown) => void

  constructor(
    call: UpstreamCall,
    resolve: (answer: Ok | ErrorAnswer) => void,
    reject: (err: unknown) => void,
  ) {
    this.call = call
    this.resolve = resolve
    this.reject = reject
  }

  start(method: string, url: string, headers: Record<string, string>, payload: unknown): void {
    const { call } = this
    if (call.signal.aborted) {
      this.settled = true
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
          headers: requestHeaders(call, headers, sent),
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

  /** Gives the call up: its caller gets `reason` (as requestUpstream's would), undici drops the connection. */
  protected abort(reason: Error): void {
    if (this.settled) return
    this.fail(fromNetworkError(reason, this.call))
    this.drop(reason)
  }

  /** Drops the upstream connection (or the request not started yet). */
  protected drop(reason: Error): void {
    if (this.controller) this.controller.abort(reason)
    else this.abandoned = reason
  }

  /** The call is over: its timer and its listener on the client go. */
  protected over(): void {
    this.settled = true
    clearTimeout(this.timer)
    this.call.signal.removeEventListener('abort', this.clientGone)
  }

  /** The call failed (a network error, a timeout, the client gone, a malformed answer). */
  protected fail(err: unknown): void {
    if (this.settled) return
    this.over()
    this.reject(err)
  }

  protected isOk(): boolean {
    return this.status >= 200 && this.status < 300
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
    // An informational answer (102 Processing): the real one follows.
    if (statusCode < 200 || this.settled) return
    this.status = statusCode
    this.headers = headers
    this.call.onFirstByte?.()
    const coding = (headerValue(headers, 'content-encoding') ?? '').trim().toLowerCase()
    this.coding = coding === 'identity' ? '' : coding
    if (this.coding !== '' && !Object.hasOwn(wholeDecoders, this.coding)) {
      if (this.isOk()) {
        this.abort(malformedUpstream(this.call, `unsupported content-encoding ${describeEncoding(headers)}`))
        return
      }
      // An error answer in an unknown encoding is still mapped by its status (its text as it came).
      this.coding = ''
    }
    if (this.isOk()) this.okStart()
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.settled) return
    if (this.isOk()) {
      this.okData(chunk)
      return
    }
    if (this.gather(chunk, ERROR_TEXT_BYTES)) return
    // Its first ERROR_TEXT_BYTES are enough to map it: the rest is not read.
    this.gather(chunk.subarray(0, ERROR_TEXT_BYTES - this.size), ERROR_TEXT_BYTES)
    this.errorAnswered()
    controller.abort(new Error('upstream error answer not read past its first bytes'))
  }

  onResponseEnd(): void {
    if (this.settled) return
    if (this.isOk()) this.okEnd()
    else this.errorAnswered()
  }

  onResponseError(_controller: Dispatcher.DispatchController, err: Error): void {
    this.fail(fromNetworkError(err, this.call))
  }

  /** An error answer read (up to ERROR_TEXT_BYTES): its text, decoded; undecodable, mapped by status alone. */
  private errorAnswered(): void {
    if (this.settled) return
    this.over()
    const { status, headers } = this
    const answer = (bytes: Buffer): void =>
      this.resolve({ ok: false, status, headers, text: bytes.toString() })
    const bytes = this.gathered()
    if (this.coding === '') answer(bytes)
    else {
      wholeDecoders[this.coding]!(bytes, { maxOutputLength: ERROR_TEXT_BYTES }, (err, out) =>
        answer(err ? Buffer.alloc(0) : out),
      )
    }
  }

  /** What was gathered of the body, as one Buffer. */
  protected gathered(): Buffer {
    const bytes = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.size)
    this.parts = []
    return bytes
  }

  /** Gathers the body's bytes, up to `limit` (true while within it). */
  protected gather(chunk: Buffer, limit: number): boolean {
    if (this.size + chunk.length > limit) return false
    this.parts.push(chunk)
    this.size += chunk.length
    return true
  }

  /** A 2xx answer's headers came. */
  protected abstract okStart(): void
  /** A piece of a 2xx answer's body. */
  protected abstract okData(chunk: Buffer): void
  /** A 2xx answer's body ended. */
  protected abstract okEnd(): void
}

/** One `exchangeJson` call. */
class JsonExchange extends Exchange<JsonAnswer & { ok: true }> {
  protected okStart(): void {}

  protected okData(chunk: Buffer): void {
    const limit = this.call.upstream.maxResponseBytes
    // Not read further: the upstream connection is dropped, not drained.
    if (!this.gather(chunk, limit))
      this.abort(malformedUpstream(this.call, `response larger than ${limit} bytes`))
  }

  protected okEnd(): void {
    if (this.settled) return
    this.over()
    const bytes = this.gathered()
    if (this.coding === '') {
      this.answer(bytes)
      return
    }
    const limit = this.call.upstream.maxResponseBytes
    wholeDecoders[this.coding]!(bytes, { maxOutputLength: limit }, (err, out) => {
      if (!err) this.answer(out)
      else if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
        this.reject(malformedUpstream(this.call, `response larger than ${limit} bytes`))
      } else this.reject(fromNetworkError(err, this.call))
    })
  }

  private answer(bytes: Buffer): void {
    let json: unknown
    try {
      json = JSON.parse(bytes.toString())
    } catch (err) {
      this.reject(malformedUpstream(this.call, 'response body is not valid JSON', err))
      return
    }
    this.resolve({ ok: true, status: this.status, headers: this.headers, json })
  }
}

const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined }

/** The bytes of parsed events that may wait for their reader before the upstream is not read further. */
const PENDING_BYTES = 64 * 1024

/**
 * One `openSse` call, and the iterator of its events once it is answered. The events parsed while the
 * reader is busy wait here and go to it as one batch; once PENDING_BYTES of them wait, the upstream
 * connection is not read further until the reader takes them.
 */
class SseExchange extends Exchange<SseAnswer & { ok: true }> implements SseEvents {
  private parser: EventSourceParser | undefined
  private decoder: TextDecoder | undefined
  /** The decompressing stream of a compressed answer. */
  private inflater: Transform | undefined
  /** Events parsed and not yet taken. */
  private pending: SseEvent[] = []
  /** The reader's pending `next()`. */
  private waiting:
    { resolve: (r: IteratorResult<SseEvent[]>) => void; reject: (e: unknown) => void } | undefined
  /** The events are over: ended, failed (`failure`) or closed (`settled` is set with it). */
  private finished = false
  private failure: unknown
  private tooLarge = false
  /** The answer was handed to the caller: what fails now fails the events, not the call. */
  private answered = false
  /** The bytes parsed into `pending` (roughly: with what an incomplete event holds). */
  private pendingBytes = 0

  protected okStart(): void {
    this.parser = createSseParser(
      (e) => this.pending.push(e),
      () => (this.tooLarge = true),
    )
    this.decoder = new TextDecoder()
    if (this.coding !== '') {
      const inflater = streamDecoders[this.coding]!()
      inflater.on('data', (bytes: Buffer) => this.parse(bytes))
      inflater.on('end', () => this.ended())
      inflater.on('error', (err) => {
        this.failEvents(fromNetworkError(err, this.call))
        this.drop(err)
      })
      this.inflater = inflater
    }
    this.answered = true
    // The deadline and the client's signal still hold for the body: `over` waits for its end.
    this.resolve({ ok: true, status: this.status, headers: this.headers, events: this })
  }

  protected okData(chunk: Buffer): void {
    if (this.finished) return
    if (this.inflater) this.inflater.write(chunk)
    else this.parse(chunk)
  }

  protected okEnd(): void {
    if (this.finished) return
    if (this.inflater) this.inflater.end()
    else this.ended()
  }

  private parse(bytes: Buffer): void {
    if (this.finished) return
    this.parser!.feed(this.decoder!.decode(bytes, { stream: true }))
    if (this.tooLarge) {
      const err = new SseEventTooLargeError()
      this.failEvents(err)
      this.drop(err)
      return
    }
    // Not read further while PENDING_BYTES of parsed events wait for a reader (a body stream's
    // high-water mark): pausing at every event waiting made a batch of each one.
    this.pendingBytes += bytes.length
    if (this.pendingBytes > PENDING_BYTES && !this.waiting) this.controller?.pause()
    this.deliver()
  }

  private ended(): void {
    if (this.finished) return
    // A last event without its blank line is incomplete: the spec says to drop it, and so do we (what
    // the decoder may still hold is part of it).
    this.finished = true
    this.over()
    this.deliver()
  }

  /** Hands the waiting reader what there is: the events parsed so far, or the end. */
  private deliver(): void {
    const waiting = this.waiting
    if (!waiting) return
    if (this.pending.length > 0) {
      this.waiting = undefined
      waiting.resolve({ done: false, value: this.take() })
      return
    }
    if (!this.finished) return
    this.waiting = undefined
    if (this.failure === undefined) waiting.resolve(DONE)
    else waiting.reject(this.failure)
  }

  private take(): SseEvent[] {
    const events = this.pending
    this.pending = []
    this.pendingBytes = 0
    return events
  }

  protected override fail(err: unknown): void {
    if (this.answered) this.failEvents(err)
    else super.fail(err)
  }

  /** The events end with `err`, after those parsed before it (the caller drops the connection if need be). */
  private failEvents(err: unknown): void {
    if (this.finished) return
    this.finished = true
    this.failure = err
    this.over()
    this.deliver()
  }

  next(): Promise<IteratorResult<SseEvent[]>> {
    if (this.pending.length > 0) {
      const events = this.take()
      if (!this.finished) this.controller?.resume()
      return Promise.resolve({ done: false, value: events })
    }
    if (this.finished)
      return this.failure === undefined ? Promise.resolve(DONE) : Promise.reject(this.failure)
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject }
      this.controller?.resume()
    })
  }

  return(): Promise<IteratorResult<SseEvent[]>> {
    this.close()
    return Promise.resolve(DONE)
  }

  close(): void {
    this.pending = []
    if (this.finished) return
    this.finished = true
    this.over()
    this.drop(new Error('the stream was left before its end'))
    this.inflater?.destroy()
  }

  [Symbol.asyncIterator](): this {
    return this
  }
}

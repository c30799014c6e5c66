import type { LookupFunction } from 'node:net'
import { Agent, request } from 'undici'
import { GatewayError } from '../errors.ts'
import { resolveAllowed, type AddressPolicy, type LookupAll } from './address-guard.ts'

// One HTTP request to a client-given URL (webhooks, media inputs) under the SSRF rules of
// address-guard.ts. The host is resolved and checked once, and the socket is then opened to that
// very address: the dispatcher's `lookup` ignores the name and answers with the checked IP, so a DNS
// answer that changes between the check and the connect (rebinding) is never used. The URL's host
// still goes out as the Host header and the TLS server name, so certificates are verified for it.

export interface SafeRequestOptions {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'HEAD'
  headers: Record<string, string>
  body?: string | Buffer
  /** The whole attempt: resolve, connect, send, and read the response body. */
  timeoutMs: number
  /** A longer response body fails the request (the rest is never read). */
  maxBytes: number
  policy: AddressPolicy
  signal?: AbortSignal
  lookup?: LookupAll
}

export interface SafeResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Buffer
}

export type SafeRequestFailure = 'timeout' | 'too_large' | 'network' | 'aborted'

/** A request that got no complete answer; its message names no secret, header or body. */
export class SafeRequestError extends Error {
  readonly kind: SafeRequestFailure
  constructor(kind: SafeRequestFailure, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'SafeRequestError'
    this.kind = kind
  }
}

/**
 * Sends one request. A forbidden address throws the GatewayError of `resolveAllowed`; a timeout,
 * an oversized body, an abort or a connection failure throws SafeRequestError. Redirects are never
 * followed: a 3xx is returned like any other answer.
 */
export async function safeRequest(url: URL, options: SafeRequestOptions): Promise<SafeResponse> {
  const timeout = new AbortController()
  const timer = setTimeout(
    () => timeout.abort(new SafeRequestError('timeout', `timed out after ${options.timeoutMs} ms`)),
    options.timeoutMs,
  )
  const signal = options.signal ? AbortSignal.any([options.signal, timeout.signal]) : timeout.signal
  let agent: Agent | undefined
  try {
    const pinned = await raceAbort(resolveAllowed(url, options.policy, options.lookup), signal)
    // Node calls `lookup` with `all: true` when it may try several families (autoSelectFamily).
    const lookup: LookupFunction = (_host, opts, cb) => {
      if (opts.all) cb(null, [{ address: pinned.address, family: pinned.family }])
      else cb(null, pinned.address, pinned.family)
    }
    agent = new Agent({
      connect: { lookup, timeout: options.timeoutMs },
      // One request per agent: no pooled socket ever serves a different, unchecked URL.
      connections: 1,
      pipelining: 0,
      allowH2: false,
    })
    const res = await request(url, {
      method: options.method,
      headers: options.headers,
      body: options.body,
      dispatcher: agent,
      signal,
      // undici's own timers would fail with their own errors; the one deadline above covers all.
      headersTimeout: 0,
      bodyTimeout: 0,
    })
    const declared = Number(res.headers['content-length'])
    if (Number.isFinite(declared) && declared > options.maxBytes) {
      res.body.on('error', () => {}).destroy()
      throw tooLarge(options.maxBytes)
    }
    const chunks: Buffer[] = []
    let size = 0
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length
      if (size > options.maxBytes) {
        res.body.on('error', () => {}).destroy()
        throw tooLarge(options.maxBytes)
      }
      chunks.push(chunk)
    }
    return { status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }
  } catch (err) {
    throw toFailure(err, signal)
  } finally {
    clearTimeout(timer)
    // Destroy rather than close: nothing is in flight any more, and a receiver that keeps the
    // socket open must not hold the caller up.
    await agent?.destroy().catch(() => {})
  }
}

function tooLarge(maxBytes: number): SafeRequestError {
  return new SafeRequestError('too_large', `response body exceeds ${maxBytes} bytes`)
}

/** Lets a slow DNS answer be cut by the deadline too (dns.lookup itself cannot be cancelled). */
function raceAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason)
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason)
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort))
  })
}

function toFailure(err: unknown, signal: AbortSignal): unknown {
  if (err instanceof SafeRequestError) return err
  if (signal.aborted) {
    const reason: unknown = signal.reason
    if (reason instanceof SafeRequestError) return reason
    return new SafeRequestError('aborted', 'request aborted', { cause: err })
  }
  // A GatewayError of the address check passes through unchanged.
  if (!(err instanceof Error) || err instanceof GatewayError) return err
  const code = (err as { code?: unknown }).code
  return new SafeRequestError(
    'network',
    `connection failed (${typeof code === 'string' ? code : err.name})`,
    {
      cause: err,
    },
  )
}

import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Server, Socket } from 'node:net'
import { GatewayError, toErrorBody } from '../errors.ts'
import type { Logger } from '../logger.ts'

// What happens on a connection outside Fastify's request/reply: malformed requests, timeouts, stalled
// bodies. The answer is still the error envelope, written as raw HTTP, and the connection is closed.

/**
 * How long a connection answered before its request was read stays half-open, dropping what the
 * client still sends. A client that writes its whole request before reading the answer gets it in
 * that time; closing with unread bytes instead makes the kernel reset the connection, which throws
 * away the answer on the client's side (nginx's lingering close, `lingering_timeout` 5 s).
 */
export const LINGER_MS = 5_000

/**
 * Ends our side of the connection (the answer then a FIN) and reads and drops whatever the client
 * still sends until it closes its side or `lingerMs` passes, then closes. `request`, when given, is
 * resumed too: the HTTP parser stops reading the socket while a request's body is paused.
 */
export function closeLingering(socket: Socket, request?: IncomingMessage, lingerMs = LINGER_MS): void {
  if (socket.destroyed) return
  const timer = setTimeout(() => socket.destroy(), lingerMs)
  timer.unref()
  socket.once('close', () => clearTimeout(timer))
  request?.resume()
  // Without Node's HTTP parser on it (a raw answer) nothing else reads the socket.
  if (socket.listenerCount('data') === 0) socket.on('data', () => {})
  socket.resume()
  socket.end()
}

const lingering = Symbol('junction.lingering')

/** Lingering connections per key (an account), bounded: what one tenant's flood can make us read. */
export interface LingerSlots {
  /** Takes a slot for `key`; false when it already has `maxPerKey`. */
  take(key: string): boolean
  release(key: string): void
  count(key: string): number
}

export function createLingerSlots(maxPerKey: number): LingerSlots {
  const counts = new Map<string, number>()
  return {
    take(key) {
      const n = counts.get(key) ?? 0
      if (n >= maxPerKey) return false
      counts.set(key, n + 1)
      return true
    },
    release(key) {
      const n = (counts.get(key) ?? 0) - 1
      if (n > 0) counts.set(key, n)
      else counts.delete(key)
    },
    count(key) {
      return counts.get(key) ?? 0
    },
  }
}

/**
 * Makes Node's own close of this connection (after an answer with `connection: close`) a lingering
 * one: Node calls `destroySoon` once that answer is written. A key (account) with all its slots
 * lingering already gets the plain close: a client opening connection after connection with bodies
 * it knows are refused would otherwise make the gateway read them all.
 */
export function lingerAfterAnswer(
  request: IncomingMessage,
  slots: LingerSlots,
  key: string,
  lingerMs = LINGER_MS,
): void {
  const socket = request.socket as Socket & { destroySoon?: () => void; [lingering]?: true }
  if (socket[lingering]) return
  if (!slots.take(key)) return
  socket[lingering] = true
  socket.once('close', () => slots.release(key))
  socket.destroySoon = () => closeLingering(socket, request, lingerMs)
}

/**
 * Writes `e` as a whole HTTP response on the socket, then closes it (lingering). Nothing is written
 * when a response has already started on this socket (it would corrupt it): the socket is only
 * destroyed.
 */
export function writeRawError(socket: Socket, e: GatewayError, requestId?: string): void {
  // An injected request (light-my-request, in tests) has a stand-in socket with nothing to write on.
  if (socket.destroyed || typeof socket.destroy !== 'function') return
  // Node's own clientError fallback checks the same field before writing.
  const current = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage
  if (!socket.writable || current?.headersSent === true) {
    socket.destroy()
    return
  }
  const body = JSON.stringify(toErrorBody(e, requestId))
  const head = [
    `HTTP/1.1 ${e.status} ${STATUS_CODES[e.status] ?? ''}`,
    'content-type: application/json; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`,
    'connection: close',
  ]
  if (requestId !== undefined) head.push(`x-request-id: ${requestId}`)
  socket.write(`${head.join('\r\n')}\r\n\r\n${body}`)
  closeLingering(socket)
}

/** Node's HTTP parser and timeout errors → the envelope. */
export function toClientError(err: Error & { code?: string }): GatewayError {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new GatewayError('request_timeout', 'the request was not received in time')
    case 'HPE_HEADER_OVERFLOW':
      return new GatewayError('headers_too_large', 'the request headers are too large')
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new GatewayError('payload_too_large', 'the chunk extensions are too large')
    default:
      return new GatewayError('invalid_request', 'the request is not valid HTTP/1.1')
  }
}

/** Fastify's `clientErrorHandler`: Node emits `clientError` for these; the socket is ours to close. */
export function createClientErrorHandler(
  log: Logger,
  newRequestId: () => string,
): (err: Error & { code?: string }, socket: Socket) => void {
  return (err, socket) => {
    // A reset connection has nobody to answer.
    if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || socket.destroyed) {
      socket.destroy()
      return
    }
    const e = toClientError(err)
    // Timeouts tell of slow or stuck clients; malformed requests are mostly scanners: kept out of info.
    const level = e.code === 'request_timeout' ? 'info' : 'debug'
    // No request was made of it, but its answer is found in the logs by an id like any other's.
    const requestId = newRequestId()
    log[level]({ code: err.code, status: e.status, reqId: requestId }, 'client error: closing the connection')
    writeRawError(socket, e, requestId)
  }
}

export interface BodyWatch {
  /** Longest silence (no byte at all) while the body is incomplete. */
  idleMs: number
  /** Slowest accepted rate over `windowMs`, in bytes per second; 0: no floor. */
  minBytesPerSecond: number
  /** The rate's window; it is first checked once the body has been arriving this long. */
  windowMs: number
  /** Monotonic milliseconds (tests pass a fake). */
  now?: () => number
}

export type BodyStall = { reason: 'idle'; ms: number } | { reason: 'slow'; bytes: number; ms: number }

/**
 * Calls `onStall` once, and stops watching, when the request's body is still incomplete and either
 * no byte arrived for `idleMs` (up to a quarter more), or fewer than `minBytesPerSecond` arrived over
 * the last `windowMs` (checked from `windowMs` after the watch began): a client trickling a byte now
 * and then would otherwise hold its connection, and the bytes it sent, up to `requestTimeoutMs`.
 * The HTTP parser consumes the socket directly, so no `data` event shows progress: the socket's byte
 * count does.
 */
export function watchBody(raw: IncomingMessage, watch: BodyWatch, onStall: (stall: BodyStall) => void): void {
  const socket = raw.socket
  const now = watch.now ?? (() => performance.now())
  const floor = watch.minBytesPerSecond
  const tick = Math.max(1, Math.ceil(Math.min(watch.idleMs, floor > 0 ? watch.windowMs : Infinity) / 4))
  let seen = socket.bytesRead
  let quiet = 0
  // Byte counts at each tick of the last window, oldest first; the first is at or before its start.
  const samples: { t: number; bytes: number }[] = [{ t: now(), bytes: seen }]
  const stop = (): void => {
    clearInterval(timer)
    raw.off('end', stop)
    raw.off('close', stop)
  }
  const stall = (s: BodyStall): void => {
    stop()
    onStall(s)
  }
  const timer = setInterval(() => {
    if (raw.complete || socket.destroyed) return stop()
    const bytes = socket.bytesRead
    if (bytes !== seen) {
      seen = bytes
      quiet = 0
    } else if (++quiet >= Math.ceil(watch.idleMs / tick)) {
      // Enough quiet ticks: at least idleMs since the last byte.
      return stall({ reason: 'idle', ms: watch.idleMs })
    }
    if (floor <= 0) return
    const t = now()
    samples.push({ t, bytes })
    while (samples.length > 1 && (samples[1] as { t: number }).t <= t - watch.windowMs) samples.shift()
    const from = samples[0] as { t: number; bytes: number }
    const elapsed = t - from.t
    if (elapsed < watch.windowMs) return
    if ((bytes - from.bytes) * 1000 < floor * elapsed) {
      stall({ reason: 'slow', bytes: bytes - from.bytes, ms: Math.round(elapsed) })
    }
  }, tick)
  timer.unref()
  raw.once('end', stop)
  raw.once('close', stop)
}

/**
 * Caps the connections one client address holds open at once: past `max`, a new connection is
 * closed as soon as it is accepted, before any byte of it is parsed. A flood of connections from one
 * address (each sending its body slowly, reconnecting as soon as it is cut) then costs an accept and
 * a close each, not a parser, a body watch and an admission. Off (0) by default: behind a reverse
 * proxy every connection comes from the proxy's address.
 */
export function limitConnectionsPerAddress(server: Server, max: number): { count(address: string): number } {
  const open = new Map<string, number>()
  if (max > 0) {
    server.on('connection', (socket: Socket) => {
      const address = socket.remoteAddress ?? ''
      const n = open.get(address) ?? 0
      if (n >= max) {
        socket.destroy()
        return
      }
      open.set(address, n + 1)
      socket.once('close', () => {
        const left = (open.get(address) ?? 1) - 1
        if (left > 0) open.set(address, left)
        else open.delete(address)
      })
    })
  }
  return { count: (address) => open.get(address) ?? 0 }
}

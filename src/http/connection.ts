import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { GatewayError, toErrorBody } from '../errors.ts'
import type { Logger } from '../logger.ts'

// What happens on a connection outside Fastify's request/reply: malformed requests, timeouts, stalled
// bodies. The answer is still the error envelope, written as raw HTTP, and the connection is closed.

/**
 * Writes `e` as a whole HTTP response on the socket, then closes it. Nothing is written when a
 * response has already started on this socket (it would corrupt it): the socket is only destroyed.
 */
export function writeRawError(socket: Socket, e: GatewayError, requestId?: string): void {
  if (socket.destroyed) return
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
  socket.end(`${head.join('\r\n')}\r\n\r\n${body}`, () => socket.destroy())
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
    log[level]({ code: err.code, status: e.status }, 'client error: closing the connection')
    writeRawError(socket, e)
  }
}

/**
 * Calls `onIdle` when no byte has arrived on the request's connection for `idleMs` (up to a quarter
 * more) while its body is still incomplete. The HTTP parser consumes the socket directly, so no
 * `data` event shows progress: the socket's byte count does.
 */
export function watchBodyIdle(raw: IncomingMessage, idleMs: number, onIdle: () => void): void {
  const socket = raw.socket
  const tick = Math.max(1, Math.ceil(idleMs / 4))
  let seen = socket.bytesRead
  let quiet = 0
  const stop = (): void => {
    clearInterval(timer)
    raw.off('end', stop)
    raw.off('close', stop)
  }
  const timer = setInterval(() => {
    if (raw.complete || socket.destroyed) return stop()
    if (socket.bytesRead !== seen) {
      seen = socket.bytesRead
      quiet = 0
      return
    }
    // Four quiet ticks: at least idleMs since the last byte.
    if (++quiet < 4) return
    stop()
    onIdle()
  }, tick)
  timer.unref()
  raw.once('end', stop)
  raw.once('close', stop)
}

import type { FastifyReply, FastifyRequest } from 'fastify'
import { toGatewayError, type GatewayError } from '../errors.ts'
import { lingerAfterAnswer } from './connection.ts'

// What every error handler does before it presents the error in its dialect's shape (the app's
// envelope, Anthropic's on /v1/messages): the same logging, the same 499, the same lingering close.

/**
 * An answer sent before the request's body was read closes the connection: otherwise Node would read
 * (and discard) the rest of the body for as long as the client keeps sending it. The close lingers.
 */
export function closeIfBodyUnread(request: FastifyRequest, reply: FastifyReply): void {
  if (request.raw.complete) return
  reply.header('connection', 'close')
  // What the client still sends is dropped for a while after the answer: a close with unread bytes
  // would reset the connection and lose the answer (connection.ts). Per account ('' without one).
  const account = (request.account as { id: string } | null)?.id ?? ''
  lingerAfterAnswer(request.raw, request.server.lingerSlots, account)
}

/**
 * Logs a route's error and readies the reply for it: the error to present, or null when the client
 * went away first (its abort cancelled the upstream call), which is answered 499 here, nobody to tell.
 */
export function prepareErrorReply(
  err: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
): GatewayError | null {
  const e = toGatewayError(err)
  if (reply.raw.destroyed) {
    request.log.info('client closed the connection before the answer')
    void reply.code(499).send()
    return null
  }
  // Refusals that are the gateway's normal state (busy, draining) are not faults: info, no stack.
  if (e.status >= 500 && e.code !== 'server_busy' && e.code !== 'shutting_down') {
    request.log.error({ err, status: e.status, code: e.code }, 'request failed')
  } else request.log.info({ status: e.status, code: e.code, param: e.param }, 'request rejected')
  closeIfBodyUnread(request, reply)
  return e
}

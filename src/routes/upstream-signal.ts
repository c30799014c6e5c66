import type { FastifyReply } from 'fastify'

/**
 * An AbortSignal that fires when the client goes away before its response was fully written,
 * so the upstream request is cancelled at once instead of running (and costing) to the end.
 */
export function upstreamSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController()
  const res = reply.raw
  const onClose = (): void => {
    if (!res.writableFinished) controller.abort(new Error('client closed the connection'))
  }
  // The client may already be gone (it left while the request was being validated or admitted).
  if (res.closed || res.destroyed) onClose()
  else res.once('close', onClose)
  return controller.signal
}

import { Readable } from 'node:stream'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { startChat } from '../inference/chat.ts'
import { parseChatRequest } from '../schemas/chat.ts'
import { writeSse } from '../sse.ts'
import type { AttemptRecord } from '../store/types.ts'
import { admitBeforeBody, attemptHeaders } from './admission.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const chatRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseChatRequest(request.body)
    const signal = upstreamSignal(reply)
    let attempts: readonly AttemptRecord[] = []
    const started = await startChat(deps, {
      account: request.account,
      req,
      api: request.routeOptions.url ?? '/v1/chat/completions',
      signal,
      log: request.log,
      onAdmitted: (id, headers, tried) => {
        reply.headers(headers).header('x-generation-id', id)
        attempts = tried
      },
      requestCounted: request.junction.requestCounted,
      onRecord: (record) => {
        request.junction.record = record
      },
      traceparent: request.junction.trace?.traceparent,
    }).catch((err: unknown) => {
      // An error answer names the deployment tried last too (the error handler keeps these).
      reply.headers(attemptHeaders(attempts))
      throw err
    })
    reply.headers(started.headers)
    if (!started.stream) return started.completion
    reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
    deps.metrics.openStreams.inc()
    reply.raw.once('close', () => deps.metrics.openStreams.dec())
    const body = writeSse(started.batches, { signal, requestId: request.id, log: request.log })
    return reply.send(Readable.from(body, { objectMode: false }))
  }
  const onRequest = admitBeforeBody(deps)
  app.post('/v1/chat/completions', { onRequest }, handler)
  app.post('/routed/v1/chat/completions', { onRequest }, handler)
}

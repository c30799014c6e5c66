import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { createEmbeddings } from '../inference/embeddings.ts'
import { parseEmbeddingsRequest } from '../schemas/embeddings.ts'
import type { AttemptRecord } from '../store/types.ts'
import { admitBeforeBody, attemptHeaders } from './admission.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const embeddingsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseEmbeddingsRequest(request.body)
    let attempts: readonly AttemptRecord[] = []
    const result = await createEmbeddings(deps, {
      account: request.account,
      req,
      api: request.routeOptions.url ?? '/routed/v1/embeddings',
      signal: upstreamSignal(reply),
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
      reply.headers(attemptHeaders(attempts))
      throw err
    })
    reply.headers(result.headers)
    return result.body
  }
  const onRequest = admitBeforeBody(deps)
  app.post('/routed/v1/embeddings', { onRequest }, handler)
  app.post('/v1/embeddings', { onRequest }, handler)
}

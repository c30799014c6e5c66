import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { createEmbeddings } from '../inference/embeddings.ts'
import { parseEmbeddingsRequest } from '../schemas/embeddings.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const embeddingsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseEmbeddingsRequest(request.body)
    const result = await createEmbeddings(deps, {
      account: request.account,
      req,
      api: request.routeOptions.url ?? '/routed/v1/embeddings',
      signal: upstreamSignal(reply),
      log: request.log,
      onAdmitted: (id, headers) => void reply.headers(headers).header('x-generation-id', id),
      onRecord: (record) => {
        request.junction.record = record
      },
      traceparent: request.junction.trace?.traceparent,
    })
    reply.headers(result.headers)
    return result.body
  }
  app.post('/routed/v1/embeddings', handler)
  app.post('/v1/embeddings', handler)
}

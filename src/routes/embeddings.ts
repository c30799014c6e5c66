import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import { parseEmbeddingsRequest } from '../schemas/embeddings.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const embeddingsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseEmbeddingsRequest(request.body)
    const { model, provider } = deps.router.resolve(req.model, 'embedding')
    if (!provider.adapter.embed) {
      throw new GatewayError(
        400,
        'invalid_request_error',
        'unsupported_parameter',
        `provider ${provider.config.name} has no embeddings`,
        {
          param: 'model',
        },
      )
    }
    const generationId = deps.ids.generation()
    reply.header('x-generation-id', generationId)
    const result = await provider.adapter.embed(req, {
      upstream: provider.config,
      upstreamModel: model.upstreamModel,
      signal: upstreamSignal(reply),
      log: request.log,
      dispatcher: provider.dispatcher,
    })
    return { ...result, model: model.slug }
  }
  app.post('/routed/v1/embeddings', handler)
  app.post('/v1/embeddings', handler)
}

import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { embeddingTokenBound } from '../billing/tokens.ts'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import type { EmbeddingsRequest, EmbeddingsResponse } from '../providers/types.ts'
import { parseEmbeddingsRequest } from '../schemas/embeddings.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const embeddingsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseEmbeddingsRequest(request.body)
    const { model, provider } = deps.router.resolve(req.model, 'embedding')
    const embed = provider.adapter.embed
    if (!embed) {
      throw new GatewayError('unsupported_parameter', `provider ${provider.config.name} has no embeddings`, {
        param: 'model',
      })
    }
    const generationId = deps.ids.generation()
    const bound = embeddingTokenBound(req)
    const meter = await deps.metering.begin({
      account: request.account,
      model,
      api: request.routeOptions.url ?? '/routed/v1/embeddings',
      generationId,
      streamed: false,
      promptTokenBound: bound,
      outputTokenBound: 0,
      tokenEstimate: Math.ceil(bound / 4),
    })
    reply.headers(meter.headers).header('x-generation-id', generationId)
    const signal = upstreamSignal(reply)
    const estimate = () => ({ prompt: inputText(req), completion: '' })
    let result: EmbeddingsResponse
    try {
      result = await embed(req, {
        upstream: provider.config,
        upstreamModel: model.upstreamModel,
        signal,
        log: request.log,
        dispatcher: provider.dispatcher,
        onFirstByte: meter.firstByte,
      })
    } catch (err) {
      await meter.finish({ produced: false, cancelled: signal.aborted, finishReason: null, estimate })
      throw err
    }
    meter.firstByte()
    const usage = result.usage
    await meter.finish({
      usage: { prompt_tokens: usage.prompt_tokens, completion_tokens: 0, total_tokens: usage.total_tokens },
      produced: true,
      cancelled: false,
      finishReason: 'stop',
      estimate,
    })
    return { ...result, model: model.slug }
  }
  app.post('/routed/v1/embeddings', handler)
  app.post('/v1/embeddings', handler)
}

function inputText(req: EmbeddingsRequest): string {
  const inputs: unknown[] = Array.isArray(req.input) ? req.input : [req.input]
  return inputs.map((i) => (typeof i === 'string' ? i : JSON.stringify(i))).join('\n')
}

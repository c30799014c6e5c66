import { Readable } from 'node:stream'
import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'
import { toChatRequest } from '../dialects/responses/request.ts'
import { responseId, toResponse, type ResponseMeta } from '../dialects/responses/response.ts'
import { writeResponsesSse } from '../dialects/responses/stream.ts'
import { startChat } from '../inference/chat.ts'
import { parseResponsesRequest } from '../schemas/responses.ts'
import { upstreamSignal } from './upstream-signal.ts'

// POST /v1/responses: the OpenAI Responses API, translated at the edge into the one chat pipeline.

export const responsesRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  app.post('/v1/responses', async (request, reply) => {
    const body = parseResponsesRequest(request.body)
    const req = toChatRequest(body)
    const signal = upstreamSignal(reply)
    const started = await startChat(deps, {
      account: request.account,
      req,
      api: '/v1/responses',
      signal,
      log: request.log,
      onAdmitted: (id, headers) => void reply.headers(headers).header('x-generation-id', id),
      onRecord: (record) => {
        request.junction.record = record
      },
      traceparent: request.junction.trace?.traceparent,
    })
    reply.headers(started.headers)
    const meta: ResponseMeta = {
      id: responseId(started.generationId),
      createdAt: Math.floor(deps.now() / 1000),
      model: body.model,
      request: body,
    }
    if (!started.stream) return toResponse(started.completion, meta)
    reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
    deps.metrics.openStreams.inc()
    reply.raw.once('close', () => deps.metrics.openStreams.dec())
    const sse = writeResponsesSse(started.batches, meta, { signal, requestId: request.id, log: request.log })
    return reply.send(Readable.from(sse, { objectMode: false }))
  })
}

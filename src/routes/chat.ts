import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { parseChatRequest } from '../schemas/chat.ts'
import { writeSse } from '../sse.ts'
import { createChunkSerialiser } from '../inference/chunk-text.ts'
import { admitBeforeBody } from './admission.ts'
import { routeChat, sendEventStream } from './chat-call.ts'

export const chatRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseChatRequest(request.body)
    const chat = routeChat(deps, request, reply, request.routeOptions.url ?? '/v1/chat/completions')
    const started = await chat.start(req)
    if (!started.stream) return started.completion
    const body = writeSse(started.batches, {
      signal: chat.signal,
      requestId: request.id,
      log: request.log,
      serialise: createChunkSerialiser(),
    })
    return sendEventStream(deps, request, reply, body)
  }
  const onRequest = admitBeforeBody(deps, { deferWhenReceived: true })
  app.post('/v1/chat/completions', { onRequest }, handler)
  app.post('/routed/v1/chat/completions', { onRequest }, handler)
}

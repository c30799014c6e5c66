import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'
import { inputItems, toChatRequest } from '../dialects/responses/request.ts'
import {
  responseId,
  toResponse,
  type ResponseMeta,
  type ResponseObject,
} from '../dialects/responses/response.ts'
import { writeResponsesSse } from '../dialects/responses/stream.ts'
import {
  deleteStoredResponse,
  getStoredResponse,
  isReference,
  loadConversation,
  resolveItemReferences,
  saveResponse,
} from '../inference/responses.ts'
import { parseResponsesRequest } from '../schemas/responses.ts'
import { admitBeforeBody } from './admission.ts'
import { routeChat, sendEventStream } from './chat-call.ts'

// The OpenAI Responses API, translated at the edge into the one chat pipeline; stored answers
// (`store`, the default) are continued by previous_response_id and read by GET/DELETE.

export const responsesRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const onRequest = admitBeforeBody(deps, { deferWhenReceived: true })
  app.post('/v1/responses', { onRequest }, async (request, reply) => {
    const body = parseResponsesRequest(request.body)
    const accountId = request.account.id
    const items = inputItems(body)
    // Stored answers are read for an admitted request only.
    if (body.previous_response_id != null || items.some(isReference))
      await request.junction.deferredAdmission?.run()
    const earlier =
      body.previous_response_id == null
        ? []
        : await loadConversation(deps, accountId, body.previous_response_id)
    const input = [...earlier, ...(await resolveItemReferences(deps, accountId, items))]
    const req = toChatRequest(body, input)
    const chat = routeChat(deps, request, reply, '/v1/responses')
    const started = await chat.start(req)
    const meta: ResponseMeta = {
      id: responseId(started.generationId),
      createdAt: Math.floor(deps.now() / 1000),
      model: body.model,
      request: body,
    }
    const save =
      body.store === false
        ? undefined
        : (response: ResponseObject) => saveResponse(deps, { accountId, input, response }, request.log)
    if (!started.stream) {
      const response = toResponse(started.completion, meta)
      await save?.(response)
      return response
    }
    const sse = writeResponsesSse(started.batches, meta, {
      signal: chat.signal,
      requestId: request.id,
      log: request.log,
      onFinal: save,
    })
    return sendEventStream(deps, request, reply, sse)
  })

  app.get<{ Params: { id: string } }>('/v1/responses/:id', async (request) =>
    getStoredResponse(deps, request.account.id, request.params.id),
  )

  app.delete<{ Params: { id: string } }>('/v1/responses/:id', async (request) => {
    await deleteStoredResponse(deps, request.account.id, request.params.id)
    return { id: request.params.id, object: 'response', deleted: true }
  })
}

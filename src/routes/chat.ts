import { Readable } from 'node:stream'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { toErrorBody, toGatewayError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { ChatChunk, UpstreamCall } from '../providers/types.ts'
import { parseChatRequest } from '../schemas/chat.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const chatRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseChatRequest(request.body)
    const { model, provider } = deps.router.resolve(req.model, 'chat')
    const generationId = deps.ids.generation()
    reply.header('x-generation-id', generationId)
    const call: UpstreamCall = {
      upstream: provider.config,
      upstreamModel: model.upstreamModel,
      signal: upstreamSignal(reply),
      log: request.log,
      dispatcher: provider.dispatcher,
    }

    if (!req.stream) {
      const completion = await provider.adapter.chat(req, call)
      return { ...completion, id: generationId, model: model.slug }
    }

    const chunks = provider.adapter.chatStream(req, call)[Symbol.asyncIterator]()
    // The first chunk is awaited before any header is sent, so a failure before the answer starts
    // (upstream 429, 500, timeout) is a normal HTTP error with its status, not a 200 stream.
    const first = await chunks.next()
    const ctx: StreamContext = {
      generationId,
      slug: model.slug,
      includeUsage: req.stream_options?.include_usage === true,
      signal: call.signal,
      requestId: request.id,
      log: request.log,
    }
    reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-cache')
      .header('x-accel-buffering', 'no')
    return reply.send(Readable.from(sseBody(first, chunks, ctx), { objectMode: false }))
  }
  app.post('/v1/chat/completions', handler)
  app.post('/routed/v1/chat/completions', handler)
}

interface StreamContext {
  generationId: string
  slug: string
  includeUsage: boolean
  signal: AbortSignal
  requestId: string
  log: Logger
}

/**
 * Upstream chunks → SSE text, as they arrive. Ids become the generation id and `model` the slug.
 * Usage is always requested upstream (billing); it is passed on only when the client asked for it.
 * A failure after the first byte is sent as one error event, and the stream ends without [DONE].
 */
export async function* sseBody(
  first: IteratorResult<ChatChunk>,
  chunks: AsyncIterator<ChatChunk>,
  ctx: StreamContext,
): AsyncGenerator<string> {
  let next = first
  try {
    while (!next.done) {
      const out = rewriteChunk(next.value, ctx)
      if (out) yield sseData(out)
      next = await chunks.next()
    }
    yield SSE_DONE
  } catch (err) {
    if (ctx.signal.aborted) return
    const e = toGatewayError(err)
    ctx.log.warn({ err, status: e.status, code: e.code }, 'stream failed after it started')
    yield sseData(toErrorBody(e, ctx.requestId))
  } finally {
    // Leaving early (client gone) must release the upstream too.
    if (!next.done) await chunks.return?.()
  }
}

function rewriteChunk(chunk: ChatChunk, ctx: StreamContext): ChatChunk | null {
  chunk.id = ctx.generationId
  chunk.model = ctx.slug
  if (!ctx.includeUsage && chunk.usage !== undefined) {
    if (chunk.choices.length === 0) return null
    delete chunk.usage
  }
  return chunk
}

import { Readable } from 'node:stream'
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import type { Metered } from '../billing/metering.ts'
import { promptText, promptTokenBound } from '../billing/tokens.ts'
import type { Deps } from '../deps.ts'
import { resolveFileReferences } from '../files/references.ts'
import { toErrorBody, toGatewayError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { ChatChunk, ChatCompletion, ChatRequest, Usage, UpstreamCall } from '../providers/types.ts'
import { parseChatRequest } from '../schemas/chat.ts'
import { SSE_DONE, sseData } from '../sse.ts'
import { upstreamSignal } from './upstream-signal.ts'

export const chatRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const handler = async (request: FastifyRequest, reply: FastifyReply) => {
    const req = parseChatRequest(request.body)
    const { model, provider } = deps.router.resolve(req.model, 'chat')
    // The caller's file ids in the messages become the files' content, inline (decisions.md).
    const resolved = await resolveFileReferences(req, {
      accountId: request.account.id,
      files: deps.store.files,
      storage: deps.fileStorage,
      maxInlineBytes: deps.config.files.maxInlineBytesPerRequest,
    })
    const generationId = deps.ids.generation()
    // Counted on the resolved request, so inlined file content is inside the bound.
    const promptBound = promptTokenBound(resolved)
    const outputBound =
      req.max_completion_tokens ??
      req.max_tokens ??
      model.maxOutputTokens ??
      deps.config.limits.defaultMaxOutputTokens
    // 429 and 402 are decided here, before anything reaches the upstream.
    const meter = await deps.metering.begin({
      account: request.account,
      model,
      api: request.routeOptions.url ?? '/v1/chat/completions',
      generationId,
      streamed: req.stream === true,
      promptTokenBound: promptBound,
      outputTokenBound: outputBound,
      // Bytes/4 is the usual tokens-per-text rule of thumb; the answer corrects it afterwards.
      tokenEstimate: Math.ceil(promptBound / 4) + Math.min(outputBound, 4_096),
    })
    reply.headers(meter.headers).header('x-generation-id', generationId)
    const call: UpstreamCall = {
      upstream: provider.config,
      upstreamModel: model.upstreamModel,
      signal: upstreamSignal(reply),
      log: request.log,
      dispatcher: provider.dispatcher,
      onFirstByte: meter.firstByte,
    }

    // The upstream failed (or the client left) before any output: the record, if any, is the prompt's.
    const failedBeforeOutput = () =>
      meter.finish({
        produced: false,
        cancelled: call.signal.aborted,
        finishReason: null,
        estimate: () => ({ prompt: promptText(req), completion: '' }),
      })

    if (!req.stream) {
      let completion: ChatCompletion
      try {
        completion = await provider.adapter.chat(resolved, call)
      } catch (err) {
        await failedBeforeOutput()
        throw err
      }
      meter.firstByte()
      await meter.finish({
        usage: completion.usage,
        produced: true,
        cancelled: false,
        finishReason: completion.choices[0]?.finish_reason ?? null,
        estimate: () => ({ prompt: promptText(req), completion: completionText(completion) }),
      })
      return { ...completion, id: generationId, model: model.slug }
    }

    const chunks = provider.adapter.chatStream(resolved, call)[Symbol.asyncIterator]()
    // The first chunk is awaited before any header is sent, so a failure before the answer starts
    // (upstream 429, 500, timeout) is a normal HTTP error with its status, not a 200 stream.
    let first: IteratorResult<ChatChunk>
    try {
      first = await chunks.next()
    } catch (err) {
      await failedBeforeOutput()
      throw err
    }
    meter.firstByte()
    const ctx: StreamContext = {
      generationId,
      slug: model.slug,
      includeUsage: req.stream_options?.include_usage === true,
      signal: call.signal,
      requestId: request.id,
      log: request.log,
      req,
      meter,
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
  req: ChatRequest
  meter: Metered
}

/** What a stream has shown so far: enough to bill it if the upstream never reports usage. */
interface StreamTally {
  usage?: Usage
  finishReason: string | null
  produced: boolean
  /** Content, reasoning and tool-call argument deltas, kept only as string pieces. */
  pieces: string[]
}

/**
 * Upstream chunks → SSE text, as they arrive. Ids become the generation id and `model` the slug.
 * Usage is always requested upstream (billing); it is passed on only when the client asked for it.
 * A failure after the first byte is sent as one error event, and the stream ends without [DONE].
 * However it ends (done, failed, client gone), `finally` records and bills exactly once.
 */
export async function* sseBody(
  first: IteratorResult<ChatChunk>,
  chunks: AsyncIterator<ChatChunk>,
  ctx: StreamContext,
): AsyncGenerator<string> {
  const tally: StreamTally = { finishReason: null, produced: false, pieces: [] }
  let next = first
  let sent = 0
  try {
    while (!next.done) {
      const out = observeChunk(next.value, ctx, tally)
      if (out) {
        yield sseData(out)
        // The response socket is corked until the next tick; when the upstream's data is already
        // buffered, the promise chain would translate every buffered chunk before that tick comes.
        // One turn of the event loop after the first event puts it on the wire at once.
        if (++sent === 1) await new Promise((resolve) => setImmediate(resolve))
      }
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
    await ctx.meter.finish({
      usage: tally.usage,
      produced: tally.produced,
      cancelled: ctx.signal.aborted,
      finishReason: tally.finishReason,
      estimate: () => ({ prompt: promptText(ctx.req), completion: tally.pieces.join('') }),
    })
  }
}

function observeChunk(chunk: ChatChunk, ctx: StreamContext, tally: StreamTally): ChatChunk | null {
  chunk.id = ctx.generationId
  chunk.model = ctx.slug
  for (const choice of chunk.choices) {
    tally.produced = true
    const d = choice.delta
    if (typeof d.content === 'string') tally.pieces.push(d.content)
    if (typeof d.reasoning === 'string') tally.pieces.push(d.reasoning)
    if (d.tool_calls)
      for (const t of d.tool_calls) tally.pieces.push(t.function?.name ?? '', t.function?.arguments ?? '')
    if (choice.finish_reason) tally.finishReason = choice.finish_reason
  }
  if (chunk.usage) tally.usage = chunk.usage
  // Junction asked for usage on the client's behalf: without include_usage, OpenAI sends no usage
  // field at all, so the usage chunk goes and so does `usage: null` on the others.
  if (!ctx.includeUsage && 'usage' in chunk) {
    if (chunk.usage && chunk.choices.length === 0) return null
    delete chunk.usage
  }
  return chunk
}

function completionText(c: ChatCompletion): string {
  const m = c.choices[0]?.message
  if (!m) return ''
  return [m.content ?? '', m.reasoning ?? '', JSON.stringify(m.tool_calls ?? '')].join('')
}

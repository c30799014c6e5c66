import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { admitKey, authenticateApiKey } from '../auth/index.ts'
import type { Deps } from '../deps.ts'
import { toAnthropicErrorBody } from '../dialects/anthropic/errors.ts'
import { anthropicOnly, toChatRequest, toCountRequest } from '../dialects/anthropic/request.ts'
import { toAnthropicMessage } from '../dialects/anthropic/response.ts'
import {
  createEventTranslator,
  type AnthropicStreamEvent,
  type EventTranslator,
} from '../dialects/anthropic/stream.ts'
import { invalidRequest, toGatewayError } from '../errors.ts'
import type { Candidate } from '../routing/router.ts'
import { countPromptTokens } from '../inference/count-tokens.ts'
import type { Logger } from '../logger.ts'
import { upstreamEventsOf } from '../providers/shared/stream.ts'
import { parseCountTokensRequest, parseMessagesRequest } from '../schemas/messages.ts'
import { sseNamedEvent } from '../sse.ts'
import { prepareErrorReply } from '../http/error-reply.ts'
import { admitBeforeBody, sendAfterDeferredAdmission } from './admission.ts'
import { routeChat, sendEventStream } from './chat-call.ts'
import { upstreamSignal } from './upstream-signal.ts'
import type { ChatChunk } from '../domain/chat.ts'

// The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`): its own auth
// (x-api-key or bearer) and error shape; the request itself goes through the one chat pipeline.

const API = '/v1/messages'

/** `anthropic-beta: a,b` (or the header repeated, which Node joins with commas) → its values. */
function betaValues(request: FastifyRequest): string[] {
  const h = request.headers['anthropic-beta']
  const all = Array.isArray(h) ? h.join(',') : (h ?? '')
  return all
    .split(',')
    .map((v) => v.trim())
    .filter((v) => v !== '')
}

export const messagesRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  app.addHook('onRequest', async (request, reply) => {
    // Anthropic's SDK reads its request id from `request-id`.
    reply.header('request-id', request.id)
    admitKey(request, await authenticateApiKey(request, deps.store.accounts, deps.now()))
  })

  // The same handling as the app's, in Anthropic's error shape.
  app.setErrorHandler((err, request, reply) =>
    sendAfterDeferredAdmission(request, err, (error) => {
      const e = prepareErrorReply(error, request, reply)
      if (e === null) return reply
      return reply
        .code(e.status)
        .headers(e.headers)
        .header('request-id', request.id)
        .send(toAnthropicErrorBody(e, request.id))
    }),
  )

  app.post(
    API,
    { onRequest: admitBeforeBody(deps, { deferWhenReceived: true }) },
    async (request: FastifyRequest, reply: FastifyReply) => {
      const parsed = parseMessagesRequest(request.body)
      const req = toChatRequest(parsed, { beta: betaValues(request) })
      const chat = routeChat(deps, request, reply, API)
      const started = await chat.start(req, { onRouted: onlyToAnthropic(anthropicOnly(parsed)) })
      if (!started.stream) return toAnthropicMessage(started.completion, parsed.stop_sequences)
      const translate = createEventTranslator({
        id: started.generationId,
        model: req.model,
        stops: parsed.stop_sequences,
      })
      const body = writeAnthropicSse(started.batches, translate, {
        signal: chat.signal,
        requestId: request.id,
        log: request.log,
      })
      return sendEventStream(deps, request, reply, body)
    },
  )

  app.post(`${API}/count_tokens`, async (request, reply) => {
    const prompt = toCountRequest(parseCountTokensRequest(request.body), { beta: betaValues(request) })
    const counted = await countPromptTokens(deps, prompt, {
      signal: upstreamSignal(reply),
      log: request.log,
      traceparent: request.junction.trace?.traceparent,
    })
    reply.header('x-junction-token-count', counted.source)
    return { input_tokens: counted.inputTokens }
  })
}

/**
 * What only Anthropic serves (server tools, URL documents) goes through when every deployment that may
 * answer is Anthropic's, in the native body; otherwise the request is a 400 naming the first of them.
 */
function onlyToAnthropic(
  only: ReturnType<typeof anthropicOnly>,
): ((candidates: readonly Candidate[]) => void) | undefined {
  const first = only[0]
  if (first === undefined) return undefined
  return (candidates) => {
    const other = candidates.find((c) => c.provider.config.kind !== 'anthropic')
    if (other === undefined) return
    throw invalidRequest(
      'unsupported_parameter',
      `${first.what} is only supported by Anthropic upstreams, and ${other.model.slug} may be served by ${other.deployment.id} (${other.provider.config.kind})`,
      first.param,
    )
  }
}

interface WriteOptions {
  signal: AbortSignal
  requestId: string
  log: Logger
}

/**
 * Chat chunk batches → Anthropic's SSE events, a batch at a time. A failure after the stream started
 * is one `error` event in Anthropic's shape, and the stream ends there (no message_stop).
 */
export async function* writeAnthropicSse(
  batches: AsyncIterable<ChatChunk[]>,
  translate: EventTranslator,
  o: WriteOptions,
): AsyncGenerator<string> {
  const frame = (events: { type: string }[]): string => events.map((e) => sseNamedEvent(e.type, e)).join('')
  let first = true
  // Anthropic's own events, when the upstream was Anthropic's (see nativeEvents); message_stop is
  // held until the relay has settled the generation, so the charge is committed before the last byte.
  let native = false
  let stop: AnthropicStreamEvent | undefined
  try {
    for await (const batch of batches) {
      const upstream = upstreamEventsOf(batch)
      let events: AnthropicStreamEvent[]
      // Once native, always: a batch with no events of its own (the usage chunk made up at the end
      // of a stream that lost its message_stop) has nothing to send.
      if (upstream || native) {
        native = true
        events = nativeEvents(upstream ?? [], {
          id: translate.meta.id,
          model: batch[0]?.model || translate.meta.model,
        })
        const i = events.findIndex((e) => e.type === 'message_stop')
        if (i >= 0) {
          stop ??= events[i]
          events = events.slice(0, i)
        }
      } else events = translate(batch)
      if (events.length === 0) continue
      yield frame(events)
      if (first) {
        // As in writeSse: the first events go on the wire at once, not after the buffered rest.
        first = false
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    // The relay is done (settled): the answer's last event. An Anthropic stream cut short of its
    // message_stop after a complete message_delta (the adapter lets that through) gets one.
    yield frame(native ? [stop ?? { type: 'message_stop' }] : translate.end())
  } catch (err) {
    if (o.signal.aborted) return
    const e = toGatewayError(err)
    o.log.warn({ err, status: e.status, code: e.code }, 'stream failed after it started')
    yield sseNamedEvent('error', toAnthropicErrorBody(e, o.requestId))
  }
}

/**
 * An Anthropic upstream's own stream events as the client gets them: unchanged, every type, but for
 * message_start's message `id` (the generation id) and `model` (the slug).
 */
export function nativeEvents(
  events: readonly unknown[],
  meta: { id: string; model: string },
): AnthropicStreamEvent[] {
  return events.map((raw) => {
    const e = raw as AnthropicStreamEvent
    if (e.type !== 'message_start' || typeof e.message !== 'object' || e.message === null) return e
    return { ...e, message: { ...(e.message as Record<string, unknown>), id: meta.id, model: meta.model } }
  })
}

import type { ChatRequest, ProviderAdapter, UpstreamCall } from '../types.ts'
import { malformedUpstream } from '../http.ts'
import { resolveReasoning } from '../shared/request.ts'
import { addUpstreamEvents, newChunkMeta } from '../shared/stream.ts'
import { postJsonChecked, postSseChecked, translateSse, type SseEvents } from '../shared/upstream.ts'
import { fromAnthropicError, fromAnthropicStreamError } from './errors.ts'
import { toCountTokensBody, toUpstreamBody } from './request.ts'
import { fromAnthropicMessage } from './response.ts'
import { createChunkTranslator } from './stream.ts'
import { z } from 'zod'
import {
  ANTHROPIC_NATIVE_ANSWER,
  ANTHROPIC_VERSION,
  anthropicMessageSchema,
  nativeAnthropicOf,
  parseAnthropicEvent,
} from './wire.ts'
import type { ChatChunk } from '../../domain/chat.ts'

// The only file of the Anthropic folder that does I/O.

function headers(call: UpstreamCall, accept: string, beta: string[]): Record<string, string> {
  const h: Record<string, string> = { 'anthropic-version': ANTHROPIC_VERSION, accept }
  if (call.upstream.apiKey) h['x-api-key'] = call.upstream.apiKey
  if (beta.length > 0) h['anthropic-beta'] = beta.join(',')
  return h
}

/** A post whose answer is a stream of events. */
function postSse(call: UpstreamCall, req: ChatRequest, payload: unknown): Promise<SseEvents> {
  const url = `${call.upstream.baseUrl}/v1/messages`
  const beta = nativeAnthropicOf(req)?.beta ?? []
  return postSseChecked(call, url, headers(call, 'text/event-stream', beta), payload, fromAnthropicError)
}

/** A post whose JSON answer is read whole. */
function postJson(
  call: UpstreamCall,
  req: ChatRequest,
  payload: unknown,
  path = '/v1/messages',
): Promise<unknown> {
  const url = `${call.upstream.baseUrl}${path}`
  const beta = nativeAnthropicOf(req)?.beta ?? []
  return postJsonChecked(call, url, headers(call, 'application/json', beta), payload, fromAnthropicError)
}

const countSchema = z.looseObject({ input_tokens: z.number().int().min(0) })

export function createAnthropicAdapter(now: () => number = Date.now): ProviderAdapter {
  const meta = (call: UpstreamCall) => newChunkMeta(call.upstreamModel, now())
  const excludeReasoning = (req: ChatRequest) => resolveReasoning(req)?.exclude === true

  return {
    async chat(req, call) {
      const body = toUpstreamBody(req, call.upstreamModel, false)
      const parsed = anthropicMessageSchema.safeParse(await postJson(call, req, body))
      if (!parsed.success) throw malformedUpstream(call, 'response is not a message', parsed.error)
      const completion = fromAnthropicMessage(parsed.data, meta(call), {
        excludeReasoning: excludeReasoning(req),
      })
      if (nativeAnthropicOf(req)) Object.assign(completion, { [ANTHROPIC_NATIVE_ANSWER]: parsed.data })
      return completion
    },

    async countTokens(req, call) {
      const body = toCountTokensBody(req, call.upstreamModel)
      const parsed = countSchema.safeParse(await postJson(call, req, body, '/v1/messages/count_tokens'))
      if (!parsed.success) throw malformedUpstream(call, 'response is not a token count', parsed.error)
      return parsed.data.input_tokens
    },

    chatStream(req, call) {
      const translate = createChunkTranslator(meta(call), { excludeReasoning: excludeReasoning(req) })
      // A native request (/v1/messages) answers in Anthropic's own events: each batch keeps the events
      // that produced it, every type (unknown ones too), for the route to send as they came.
      const native = nativeAnthropicOf(req) !== undefined
      let pending: unknown[] = []
      const attach = native
        ? (batch: ChatChunk[]): boolean => {
            if (pending.length === 0) return false
            addUpstreamEvents(batch, pending)
            pending = []
            return true
          }
        : undefined
      return translateSse(
        call,
        // Translation errors (400) are thrown before anything is sent upstream.
        () => postSse(call, req, toUpstreamBody(req, call.upstreamModel, true)),
        (json) => {
          const parsed = parseAnthropicEvent(json)
          if (!parsed.ok)
            throw malformedUpstream(call, 'stream event is not a Messages API event', parsed.error)
          const event = parsed.event
          if (event === undefined) {
            if (native) pending.push(json)
            return { chunks: [] }
          }
          if (event.type === 'error') {
            call.log.warn(
              { provider: call.upstream.name, error: event.error.type },
              'upstream error event mid-stream',
            )
            throw fromAnthropicStreamError(call.upstream.name, event)
          }
          const chunks = translate(event)
          // Out of order: an upstream protocol error, never a silently merged or empty answer.
          const violation = translate.state.violation
          if (violation !== undefined)
            throw malformedUpstream(call, `stream events out of order: ${violation}`)
          // A message_start resent (no chunks from it) is not the client's to see twice either.
          if (native && (chunks.length > 0 || event.type !== 'message_start')) pending.push(json)
          return { chunks, last: event.type === 'message_stop' }
        },
        {
          onEnd: (completed) => {
            if (completed) return []
            // message_stop missing after a complete message_delta: the answer is whole, only the end marker was lost.
            if (translate.state.finishReason === null) {
              throw malformedUpstream(call, 'stream ended before the answer was complete')
            }
            return translate.end()
          },
          attach,
        },
      )
    },
  }
}

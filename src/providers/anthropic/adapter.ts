import type { ChatChunk, ChatRequest, ProviderAdapter, UpstreamCall } from '../types.ts'
import { readSse } from '../../sse.ts'
import {
  fromNetworkError,
  headerValue,
  malformedUpstream,
  postUpstream,
  readJson,
  readLimited,
  type UpstreamResponse,
} from '../http.ts'
import { fromAnthropicError, fromAnthropicStreamError } from './errors.ts'
import { resolveReasoning } from '../shared/request.ts'
import { toAnthropicRequest } from './request.ts'
import { fromAnthropicMessage, type ChunkMeta } from './response.ts'
import { createChunkTranslator } from './stream.ts'
import { ANTHROPIC_VERSION, anthropicMessageSchema, parseAnthropicEvent } from './wire.ts'

// The only file of the Anthropic folder that does I/O.

function headers(call: UpstreamCall, accept: string): Record<string, string> {
  const h: Record<string, string> = { 'anthropic-version': ANTHROPIC_VERSION, accept }
  if (call.upstream.apiKey) h['x-api-key'] = call.upstream.apiKey
  return h
}

async function post(call: UpstreamCall, payload: unknown, accept: string): Promise<UpstreamResponse> {
  const res = await postUpstream(call, `${call.upstream.baseUrl}/v1/messages`, headers(call, accept), payload)
  if (res.status >= 200 && res.status < 300) return res
  let text = ''
  try {
    text = await readLimited(res.body)
  } catch {
    // The status alone decides the mapping.
  }
  call.log.warn({ provider: call.upstream.name, status: res.status }, 'upstream returned an error')
  throw fromAnthropicError(call.upstream.name, res.status, text, headerValue(res.headers, 'retry-after'), [
    call.upstream.apiKey,
  ])
}

export function createAnthropicAdapter(now: () => number = Date.now): ProviderAdapter {
  const meta = (call: UpstreamCall): ChunkMeta => ({
    id: '',
    model: call.upstreamModel,
    created: Math.floor(now() / 1000),
  })
  const excludeReasoning = (req: ChatRequest) => resolveReasoning(req)?.exclude === true

  return {
    async chat(req, call) {
      const body = toAnthropicRequest({ ...req, stream: false }, call.upstreamModel)
      const res = await post(call, body, 'application/json')
      const parsed = anthropicMessageSchema.safeParse(await readJson(call, res.body))
      if (!parsed.success) throw malformedUpstream(call, 'response is not a message', parsed.error)
      return fromAnthropicMessage(parsed.data, meta(call), { excludeReasoning: excludeReasoning(req) })
    },

    async *chatStream(req, call): AsyncGenerator<ChatChunk> {
      // Translation errors (400) are thrown before anything is sent upstream.
      const body = toAnthropicRequest({ ...req, stream: true }, call.upstreamModel)
      const res = await post(call, body, 'text/event-stream')
      const translate = createChunkTranslator(meta(call), { excludeReasoning: excludeReasoning(req) })
      let completed = false
      try {
        for await (const sse of readSse(res.body)) {
          let json: unknown
          try {
            json = JSON.parse(sse.data)
          } catch (err) {
            throw malformedUpstream(call, 'stream event is not valid JSON', err)
          }
          const parsed = parseAnthropicEvent(json)
          if (!parsed.ok)
            throw malformedUpstream(call, 'stream event is not a Messages API event', parsed.error)
          const event = parsed.event
          if (event === undefined) continue
          if (event.type === 'error') {
            call.log.warn(
              { provider: call.upstream.name, error: event.error.type },
              'upstream error event mid-stream',
            )
            throw fromAnthropicStreamError(call.upstream.name, event)
          }
          for (const chunk of translate(event)) yield chunk
          if (event.type === 'message_stop') {
            completed = true
            break
          }
        }
      } catch (err) {
        throw fromNetworkError(err, call)
      } finally {
        // Leaving early (client gone, error) must release the upstream connection now.
        if (!completed) res.body.destroy()
      }
      if (!completed) {
        // message_stop missing after a complete message_delta: the answer is whole, only the end marker was lost.
        if (translate.state.finishReason === null) {
          throw malformedUpstream(call, 'stream ended before the answer was complete')
        }
        for (const chunk of translate.end()) yield chunk
      }
    },
  }
}

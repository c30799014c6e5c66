import type { ChatRequest, ProviderAdapter, UpstreamCall } from '../types.ts'
import { malformedUpstream } from '../http.ts'
import { resolveReasoning } from '../shared/request.ts'
import { newChunkMeta } from '../shared/stream.ts'
import { postJsonChecked, postSseChecked, translateSse, type SseEvents } from '../shared/upstream.ts'
import { fromGeminiError, fromGeminiStreamError } from './errors.ts'
import { toGeminiCountTokensRequest, toGeminiEmbedRequest, toGeminiRequest } from './request.ts'
import { fromGeminiEmbeddings, fromGeminiResponse } from './response.ts'
import { createChunkTranslator } from './stream.ts'
import {
  geminiCountTokensResponseSchema,
  geminiEmbedResponseSchema,
  geminiErrorBodySchema,
  geminiResponseSchema,
} from './wire.ts'

// The only file of the Gemini folder that does I/O. The key goes in the x-goog-api-key header, never
// in the URL (`?key=`), so it cannot end up in a log line or an error message that quotes a URL.

function headers(call: UpstreamCall, accept: string): Record<string, string> {
  const h: Record<string, string> = { accept }
  if (call.upstream.apiKey) h['x-goog-api-key'] = call.upstream.apiKey
  return h
}

function url(call: UpstreamCall, method: string): string {
  return `${call.upstream.baseUrl}/v1beta/models/${encodeURIComponent(call.upstreamModel)}:${method}`
}

/** A post whose answer is a stream of events. */
function postSse(call: UpstreamCall, method: string, payload: unknown): Promise<SseEvents> {
  return postSseChecked(call, url(call, method), headers(call, 'text/event-stream'), payload, fromGeminiError)
}

/** A post whose JSON answer is read whole. */
function postJson(call: UpstreamCall, method: string, payload: unknown): Promise<unknown> {
  return postJsonChecked(call, url(call, method), headers(call, 'application/json'), payload, fromGeminiError)
}

export function createGeminiAdapter(now: () => number = Date.now): ProviderAdapter {
  const meta = (call: UpstreamCall) => newChunkMeta(call.upstreamModel, now())
  const excludeReasoning = (req: ChatRequest) => resolveReasoning(req)?.exclude === true

  return {
    async chat(req, call) {
      const body = toGeminiRequest(req, call.upstreamModel)
      const parsed = geminiResponseSchema.safeParse(await postJson(call, 'generateContent', body))
      if (!parsed.success)
        throw malformedUpstream(call, 'response is not a GenerateContentResponse', parsed.error)
      return fromGeminiResponse(parsed.data, meta(call), { excludeReasoning: excludeReasoning(req) })
    },

    async countTokens(req, call) {
      const body = toGeminiCountTokensRequest(req, call.upstreamModel)
      const parsed = geminiCountTokensResponseSchema.safeParse(await postJson(call, 'countTokens', body))
      if (!parsed.success) throw malformedUpstream(call, 'response is not a token count', parsed.error)
      return parsed.data.totalTokens
    },

    chatStream(req, call) {
      const translate = createChunkTranslator(meta(call), { excludeReasoning: excludeReasoning(req) })
      return translateSse(
        call,
        // Translation errors (400) are thrown before anything is sent upstream.
        () => postSse(call, 'streamGenerateContent?alt=sse', toGeminiRequest(req, call.upstreamModel)),
        (json) => {
          if (geminiErrorBodySchema.safeParse(json).success) {
            call.log.warn({ provider: call.upstream.name }, 'upstream error event mid-stream')
            throw fromGeminiStreamError(call.upstream.name, json)
          }
          const parsed = geminiResponseSchema.safeParse(json)
          if (!parsed.success) {
            throw malformedUpstream(call, 'stream event is not a GenerateContentResponse', parsed.error)
          }
          const chunks = translate(parsed.data)
          // Streamed arguments that cannot be assembled: an upstream error, never a wrong call.
          const violation = translate.state.violation
          if (violation !== undefined) throw malformedUpstream(call, `function call stream: ${violation}`)
          return { chunks }
        },
        {
          // Gemini has no end marker: the last event carries finishReason. Without one the stream was cut.
          onEnd: () => {
            if (translate.state.finishReason === null) {
              throw malformedUpstream(call, 'stream ended before the answer was complete')
            }
            return translate.end()
          },
        },
      )
    },

    async embed(req, call) {
      const json = await postJson(call, 'batchEmbedContents', toGeminiEmbedRequest(req, call.upstreamModel))
      const parsed = geminiEmbedResponseSchema.safeParse(json)
      if (!parsed.success)
        throw malformedUpstream(call, 'response is not a batchEmbedContents answer', parsed.error)
      return fromGeminiEmbeddings(parsed.data, req, req.model)
    },
  }
}

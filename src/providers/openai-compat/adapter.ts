import type { ProviderAdapter, UpstreamCall } from '../types.ts'
import { malformedUpstream } from '../http.ts'
import { upstreamFault } from '../shared/errors.ts'
import { postJsonChecked, postSseChecked, translateSse, type SseEvents } from '../shared/upstream.ts'
import { fromOpenAIError } from './errors.ts'
import { createChunkTemplates } from './stream-template.ts'
import { toOpenAIChatRequest, toOpenAIEmbeddingsRequest } from './request.ts'
import { fromOpenAIChunk, fromOpenAICompletion, fromOpenAIEmbeddings } from './response.ts'
import {
  fastOpenAICompletion,
  isOpenAIStreamError,
  openAICompletionSchema,
  openAIEmbeddingsSchema,
  parseOpenAIChunk,
} from './wire.ts'

function authHeaders(call: UpstreamCall): Record<string, string> {
  return call.upstream.apiKey ? { authorization: `Bearer ${call.upstream.apiKey}` } : {}
}

/** A post whose answer is a stream of events. */
function postSse(call: UpstreamCall, path: string, payload: unknown): Promise<SseEvents> {
  const url = `${call.upstream.baseUrl}${path}`
  const headers = { ...authHeaders(call), accept: 'text/event-stream' }
  return postSseChecked(call, url, headers, payload, fromOpenAIError)
}

/** A post whose JSON answer is read whole. */
function postJson(call: UpstreamCall, path: string, payload: unknown): Promise<unknown> {
  const url = `${call.upstream.baseUrl}${path}`
  const headers = { ...authHeaders(call), accept: 'application/json' }
  return postJsonChecked(call, url, headers, payload, fromOpenAIError)
}

export interface OpenAICompatOptions {
  /** False: every stream event is parsed and translated (the slow path the templates must equal). */
  streamTemplates?: boolean
}

export function createOpenAICompatAdapter(
  now: () => number = Date.now,
  options: OpenAICompatOptions = {},
): ProviderAdapter {
  return {
    async chat(req, call) {
      const body = toOpenAIChatRequest(
        { ...req, stream: false, stream_options: undefined },
        call.upstreamModel,
        call.upstream.outputLimitField,
      )
      delete body.stream_options
      const json = await postJson(call, '/chat/completions', body)
      const fast = fastOpenAICompletion(json)
      if (fast) return fromOpenAICompletion(fast, now())
      const parsed = openAICompletionSchema.safeParse(json)
      if (!parsed.success) throw malformedUpstream(call, 'response is not a chat completion', parsed.error)
      return fromOpenAICompletion(parsed.data, now())
    },

    chatStream(req, call) {
      let finished = false
      const templates = options.streamTemplates === false ? undefined : createChunkTemplates()
      return translateSse(
        call,
        () =>
          postSse(
            call,
            '/chat/completions',
            toOpenAIChatRequest(req, call.upstreamModel, call.upstream.outputLimitField),
          ),
        (json, data) => {
          if (isOpenAIStreamError(json)) {
            throw upstreamFault(call.upstream.name, 'failed mid-stream', 200, json)
          }
          const learnable = templates?.learnable(data, json) === true
          const chunk = parseOpenAIChunk(json)
          if (!chunk) throw malformedUpstream(call, 'stream event is not a chat completion chunk')
          if (chunk.choices.some((c) => c.finish_reason)) finished = true
          const translated = fromOpenAIChunk(chunk, now())
          if (learnable) templates?.learn(data, translated)
          return { chunks: [translated] }
        },
        {
          marker: '[DONE]',
          // An event like the one before but for its text: the chunk without parsing (stream-template.ts).
          fromText: templates
            ? (data) => {
                const chunk = templates.match(data)
                if (chunk?.choices[0]!.finish_reason) finished = true
                return chunk
              }
            : undefined,
          // Some servers omit [DONE] after a complete answer; a stream that stops before any finish_reason was cut.
          onEnd: (done) => {
            if (!done && !finished)
              throw malformedUpstream(call, 'stream ended before the answer was complete')
            return []
          },
        },
      )
    },

    async embed(req, call) {
      const json = await postJson(call, '/embeddings', toOpenAIEmbeddingsRequest(req, call.upstreamModel))
      const parsed = openAIEmbeddingsSchema.safeParse(json)
      if (!parsed.success) throw malformedUpstream(call, 'response is not an embeddings list', parsed.error)
      return fromOpenAIEmbeddings(parsed.data, req.model)
    },
  }
}

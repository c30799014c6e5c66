import { deltaChunk, usageChunk, type ChunkDelta, type ChunkMeta } from '../shared/stream.ts'
import type { ChatChunk, FinishReason, Usage } from '../types.ts'
import {
  flushThought,
  mapFinishReason,
  newPartState,
  readParts,
  toUsage,
  type PartEvent,
  type PartState,
  type TranslateOptions,
} from './response.ts'
import type { GeminiResponse, GeminiUsage } from './wire.ts'

// Gemini stream (`streamGenerateContent?alt=sse`) → OpenAI chunks, as they arrive. Each event is a
// whole GenerateContentResponse holding the next parts; a function call comes whole in one part, so
// its arguments go out in one delta. usageMetadata is cumulative (replace, don't add) and may come
// in an event after the one with finishReason, so the usage chunk goes out at the end.
// https://ai.google.dev/gemini-api/docs/text-generation#streaming-responses

export interface GeminiStreamState extends PartState {
  started: boolean
  finishReason: FinishReason | null
  usage: GeminiUsage | undefined
  usageSent: boolean
}

export interface GeminiChunkTranslator {
  (event: GeminiResponse): ChatChunk[]
  /** After the last event: the usage chunk, when the answer was complete. */
  end(): ChatChunk[]
  readonly state: GeminiStreamState
  usage(): Usage
}

export function createChunkTranslator(
  meta: ChunkMeta,
  options: TranslateOptions = {},
): GeminiChunkTranslator {
  const state: GeminiStreamState = {
    ...newPartState(),
    started: false,
    finishReason: null,
    usage: undefined,
    usageSent: false,
  }
  let id = meta.id

  const chunk = (delta: ChunkDelta, finish: FinishReason | null = null): ChatChunk =>
    deltaChunk(id, meta, delta, finish)
  const toChunk = (e: PartEvent): ChatChunk => {
    switch (e.type) {
      case 'content':
        return chunk({ content: e.text })
      case 'reasoning':
        return chunk({ reasoning: e.text })
      case 'tool_call':
        return chunk({
          tool_calls: [
            {
              index: e.index,
              id: e.call.id,
              type: 'function',
              function: { name: e.call.function.name, arguments: e.call.function.arguments },
            },
          ],
        })
      case 'detail':
        return chunk({ reasoning_details: [e.detail] })
    }
  }

  const translate = (event: GeminiResponse): ChatChunk[] => {
    const out: ChatChunk[] = []
    if (!state.started) {
      state.started = true
      id = event.responseId ?? id
      out.push(chunk({ role: 'assistant', content: '' }))
    }
    if (event.usageMetadata) state.usage = event.usageMetadata
    if (state.finishReason !== null) return out
    const candidate = event.candidates?.[0]
    out.push(...readParts(candidate?.content?.parts ?? [], state, options).map(toChunk))
    if (candidate?.finishReason) {
      out.push(...flushThought(state).map(toChunk))
      state.finishReason = mapFinishReason(candidate.finishReason, state.toolCalls > 0)
      out.push(chunk({}, state.finishReason))
    } else if (candidate === undefined && event.promptFeedback?.blockReason) {
      // The prompt itself was blocked: no candidate at all.
      state.finishReason = 'content_filter'
      out.push(chunk({}, state.finishReason))
    }
    return out
  }

  const usage = (): Usage => toUsage(state.usage)
  return Object.assign(translate, {
    end: (): ChatChunk[] => {
      if (state.finishReason === null || state.usageSent) return []
      state.usageSent = true
      return [usageChunk(id, meta, usage())]
    },
    state,
    usage,
  })
}

import { deltaChunk, usageChunk, type ChunkDelta, type ChunkMeta } from '../shared/stream.ts'
import {
  flushThought,
  mapFinishReason,
  newPartState,
  readParts,
  signatureDetail,
  toUsage,
  type PartEvent,
  type PartState,
  type TranslateOptions,
} from './response.ts'
import { toolCallId } from './request.ts'
import { createArgsAssembler, type ArgsAssembler } from './stream-args.ts'
import type { GeminiResponse, GeminiResponsePart, GeminiUsage } from './wire.ts'
import type { ChatChunk, FinishReason, Usage } from '../../domain/chat.ts'

// Gemini stream (`streamGenerateContent?alt=sse`) → OpenAI chunks, as they arrive. Each event is a
// whole GenerateContentResponse holding the next parts; a function call usually comes whole in one
// part, so its arguments go out in one delta. Vertex AI can also stream a call's arguments in pieces
// (`willContinue`, `partialArgs`): the call's id and name go out when it opens and its assembled
// arguments in one delta when it closes (stream-args.ts). usageMetadata is cumulative (replace,
// don't add) and may come in an event after the one with finishReason, so the usage chunk goes out
// at the end. https://ai.google.dev/gemini-api/docs/text-generation#streaming-responses

export interface GeminiStreamState extends PartState {
  started: boolean
  finishReason: FinishReason | null
  usage: GeminiUsage | undefined
  usageSent: boolean
  /** A function call whose arguments are still arriving in pieces. */
  openCall?: { index: number; args: ArgsAssembler }
  /** The first piece of a streamed call that could not be assembled; nothing after it is translated. */
  violation?: string
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

  /** The closing delta of the open streamed call: its arguments, whole. */
  const closeCall = (): ChatChunk[] => {
    const open = state.openCall
    if (!open) return []
    state.openCall = undefined
    const args = JSON.stringify(open.args.value)
    return [chunk({ tool_calls: [{ index: open.index, function: { arguments: args } }] })]
  }

  /** A part of a call streamed in pieces: its opening, a piece of its arguments, or its end. */
  const onStreamedCall = (part: GeminiResponsePart): ChatChunk[] => {
    const call = part.functionCall ?? {}
    const out: ChatChunk[] = []
    if (!state.openCall) {
      // A stray closing `{}` after a call closed carries nothing.
      if (call.name === undefined) {
        if (call.partialArgs?.length) state.violation ??= 'partialArgs outside a function call'
        return out
      }
      out.push(...flushThought(state).map(toChunk))
      const index = state.toolCalls++
      const callId = call.id || toolCallId(index, call.name)
      state.openCall = { index, args: createArgsAssembler(call.args ?? {}) }
      out.push(
        chunk({
          tool_calls: [{ index, id: callId, type: 'function', function: { name: call.name, arguments: '' } }],
        }),
      )
      // The signature rides on the call's first piece, as on a whole call (readParts).
      if (part.thoughtSignature) out.push(toChunk(signatureDetail(part.thoughtSignature, callId, state)))
    }
    const problem = state.openCall.args.apply(call.partialArgs ?? [])
    if (problem !== undefined) {
      state.violation ??= problem
      return out
    }
    if (call.willContinue !== true) out.push(...closeCall())
    return out
  }

  /** Parts in order: whole ones through readParts, the pieces of a streamed call assembled here. */
  const translateParts = (parts: GeminiResponsePart[]): ChatChunk[] => {
    const out: ChatChunk[] = []
    let whole: GeminiResponsePart[] = []
    const flush = () => {
      out.push(...readParts(whole, state, options).map(toChunk))
      whole = []
    }
    for (const part of parts) {
      const call = part.functionCall
      // A new call closes the one still open (the `{}` that should have closed it never came).
      if (state.openCall && call?.name !== undefined) {
        flush()
        out.push(...closeCall())
      }
      const piece =
        call !== undefined &&
        (call.willContinue !== undefined || call.partialArgs !== undefined || call.name === undefined)
      if (piece) {
        flush()
        out.push(...onStreamedCall(part))
        if (state.violation !== undefined) return out
        continue
      }
      // Anything else ends a streamed call left open.
      if (state.openCall) {
        flush()
        out.push(...closeCall())
      }
      whole.push(part)
    }
    flush()
    return out
  }

  const translate = (event: GeminiResponse): ChatChunk[] => {
    const out: ChatChunk[] = []
    if (state.violation !== undefined) return out
    if (!state.started) {
      state.started = true
      id = event.responseId ?? id
      out.push(chunk({ role: 'assistant', content: '' }))
    }
    if (event.usageMetadata) state.usage = event.usageMetadata
    if (state.finishReason !== null) return out
    const candidate = event.candidates?.[0]
    out.push(...translateParts(candidate?.content?.parts ?? []))
    if (state.violation !== undefined) return out
    if (candidate?.finishReason) {
      out.push(...closeCall())
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

import type { ChatChunk, FinishReason, ReasoningDetail, Usage } from '../types.ts'
import { deltaChunk, usageChunk, type ChunkDelta, type ChunkMeta } from '../shared/stream.ts'
import {
  estimateTokens,
  mapStopReason,
  redactedDetail,
  thinkingDetail,
  toUsage,
  type TranslateOptions,
} from './response.ts'
import type { AnthropicEvent, AnthropicUsage } from './wire.ts'

// Anthropic stream events → OpenAI chunks, as they arrive. Pure apart from the state it keeps.
// Sequence: message_start, then per content block content_block_start / _delta… / _stop, then
// message_delta (stop_reason, final usage) and message_stop; ping anywhere.
// https://docs.anthropic.com/en/docs/build-with-claude/streaming

interface OpenBlock {
  type: string
  /** tool_use: position among this answer's tool calls (the OpenAI `index`). */
  toolIndex?: number
  thinking?: string
  signature?: string
  data?: string
}

export interface AnthropicStreamState {
  /** message_start seen. */
  started: boolean
  /** message_delta with a stop_reason seen: the answer is complete. */
  finishReason: FinishReason | null
  /** message_stop seen. */
  stopped: boolean
  /** Usage so far; message_delta usage is cumulative, so it replaces, never adds. */
  usage: Partial<AnthropicUsage>
  blocks: Map<number, OpenBlock>
  toolCalls: number
  reasoningDetails: number
  thinkingChars: number
  /** The usage chunk was emitted. */
  usageSent: boolean
}

export interface AnthropicChunkTranslator {
  (event: AnthropicEvent): ChatChunk[]
  /** After the last event: the usage chunk if message_stop never came but the answer was complete. */
  end(): ChatChunk[]
  readonly state: AnthropicStreamState
  /** Usage as Junction reports it (also for a cut stream: what the upstream counted so far). */
  usage(): Usage
}

export function createChunkTranslator(
  meta: ChunkMeta,
  options: TranslateOptions = {},
): AnthropicChunkTranslator {
  const state: AnthropicStreamState = {
    started: false,
    finishReason: null,
    stopped: false,
    usage: {},
    blocks: new Map(),
    toolCalls: 0,
    reasoningDetails: 0,
    thinkingChars: 0,
    usageSent: false,
  }
  let id = meta.id

  const chunk = (delta: ChunkDelta, finish: FinishReason | null = null): ChatChunk =>
    deltaChunk(id, meta, delta, finish)
  const usage = (): Usage => toUsage(state.usage, estimateTokens(state.thinkingChars))
  const finalChunk = (): ChatChunk => {
    state.usageSent = true
    return usageChunk(id, meta, usage())
  }
  const mergeUsage = (u: Record<string, unknown> | undefined) => {
    if (!u) return
    for (const [k, v] of Object.entries(u))
      if (typeof v === 'number') (state.usage as Record<string, number>)[k] = v
  }
  const detail = (d: ReasoningDetail): ChatChunk => chunk({ reasoning_details: [d] })

  const translate = (event: AnthropicEvent): ChatChunk[] => {
    switch (event.type) {
      case 'message_start':
        state.started = true
        id = event.message.id || id
        mergeUsage(event.message.usage)
        return [chunk({ role: 'assistant', content: '' })]

      case 'content_block_start': {
        const b = event.content_block
        const open: OpenBlock = { type: b.type }
        state.blocks.set(event.index, open)
        if (b.type === 'tool_use') {
          const tb = b as { id: string; name: string }
          open.toolIndex = state.toolCalls++
          return [
            chunk({
              tool_calls: [
                {
                  index: open.toolIndex,
                  id: tb.id,
                  type: 'function',
                  function: { name: tb.name, arguments: '' },
                },
              ],
            }),
          ]
        }
        if (b.type === 'thinking') {
          open.thinking = ''
          const start = (b as { thinking: string }).thinking
          return start === '' ? [] : onThinking(open, start)
        }
        if (b.type === 'redacted_thinking') open.data = (b as { data: string }).data
        if (b.type === 'text') {
          const start = (b as { text: string }).text
          return start === '' ? [] : [chunk({ content: start })]
        }
        return []
      }

      case 'content_block_delta': {
        const open = state.blocks.get(event.index)
        const d = event.delta
        if (d.type === 'text_delta') return [chunk({ content: (d as { text: string }).text })]
        if (d.type === 'input_json_delta' && open?.toolIndex !== undefined) {
          const partial = (d as { partial_json: string }).partial_json
          return partial === ''
            ? []
            : [chunk({ tool_calls: [{ index: open.toolIndex, function: { arguments: partial } }] })]
        }
        if (d.type === 'thinking_delta' && open) return onThinking(open, (d as { thinking: string }).thinking)
        if (d.type === 'signature_delta' && open)
          open.signature = (open.signature ?? '') + (d as { signature: string }).signature
        return []
      }

      case 'content_block_stop': {
        const open = state.blocks.get(event.index)
        state.blocks.delete(event.index)
        // A thinking block's detail goes out whole once its signature is known: a client that
        // sends it back needs text and signature together.
        if (open?.type === 'thinking' && !options.excludeReasoning) {
          return [detail(thinkingDetail(open.thinking ?? '', open.signature, state.reasoningDetails++))]
        }
        if (open?.type === 'redacted_thinking' && open.data !== undefined) {
          return [detail(redactedDetail(open.data, state.reasoningDetails++))]
        }
        return []
      }

      case 'message_delta':
        mergeUsage(event.usage)
        if (event.delta.stop_reason === undefined || event.delta.stop_reason === null) return []
        state.finishReason = mapStopReason(event.delta.stop_reason)
        return [chunk({}, state.finishReason)]

      case 'message_stop':
        state.stopped = true
        return state.usageSent ? [] : [finalChunk()]

      // ping: keep-alive; error: the adapter turns it into a GatewayError before it gets here.
      default:
        return []
    }
  }

  function onThinking(open: OpenBlock, text: string): ChatChunk[] {
    open.thinking = (open.thinking ?? '') + text
    state.thinkingChars += text.length
    if (options.excludeReasoning || text === '') return []
    return [chunk({ reasoning: text })]
  }

  return Object.assign(translate, {
    end: (): ChatChunk[] => (state.finishReason !== null && !state.usageSent ? [finalChunk()] : []),
    state,
    usage,
  })
}

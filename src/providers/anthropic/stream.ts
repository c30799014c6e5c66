import { deltaChunk, usageChunk, type ChunkDelta, type ChunkMeta } from '../shared/stream.ts'
import {
  estimateTokens,
  mapStopReason,
  matchedStop,
  redactedDetail,
  refusalText,
  thinkingDetail,
  toUsage,
  type TranslateOptions,
} from './response.ts'
import type { AnthropicEvent, AnthropicResponseBlock, AnthropicStopDetails, AnthropicUsage } from './wire.ts'
import type { ChatChunk, FinishReason, ReasoningDetail, Usage } from '../../domain/chat.ts'

// Anthropic stream events → OpenAI chunks, as they arrive. Pure apart from the state it keeps.
// Sequence: message_start, then per content block content_block_start / _delta… / _stop, then
// message_delta (stop_reason, final usage) and message_stop; ping anywhere.
// https://docs.anthropic.com/en/docs/build-with-claude/streaming
// A sequence out of that order (an event before message_start, a message_start of another message
// before message_stop, a delta for a block never opened, message_stop without a stop reason) is
// recorded as `state.violation`; the adapter ends the stream with an error instead of passing off a
// wrong answer. A message_start repeating the open message's id is a resend, not a second message: it
// is ignored (the AI SDK's Anthropic provider tests expect exactly that of a duplicate).
//
// The translator's pieces are functions of one `Translation` (its state, the chunk id so far, its
// meta and options), each for one kind of event or block; `createChunkTranslator` makes the
// Translation and hands out the function over it, with `state` where a test reaches it.

interface OpenBlock {
  type: string
  /** tool_use: position among this answer's tool calls (the OpenAI `index`). */
  toolIndex?: number
  /** tool_use: the input content_block_start carried, sent whole if no delta brings any. */
  input?: unknown
  /** tool_use: some input_json_delta carried text. */
  argsSent?: boolean
  thinking?: string
  signature?: string
  data?: string
}

export interface AnthropicStreamState {
  /** message_start seen. */
  started: boolean
  /** The id message_start gave the open message (a repeat of it is ignored). */
  messageId?: string
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
  /** The first protocol violation seen (see above); nothing after it is translated. */
  violation?: string
}

export interface AnthropicChunkTranslator {
  (event: AnthropicEvent): ChatChunk[]
  /** After the last event: the usage chunk if message_stop never came but the answer was complete. */
  end(): ChatChunk[]
  readonly state: AnthropicStreamState
  /** Usage as Junction reports it (also for a cut stream: what the upstream counted so far). */
  usage(): Usage
}

/** One stream's translation: what every piece below reads and updates. */
interface Translation {
  state: AnthropicStreamState
  meta: ChunkMeta
  options: TranslateOptions
  /** The chunks' id: the meta's until message_start names the message. */
  id: string
}

const chunk = (x: Translation, delta: ChunkDelta, finish: FinishReason | null = null): ChatChunk =>
  deltaChunk(x.id, x.meta, delta, finish)

const usageOf = (state: AnthropicStreamState): Usage =>
  toUsage(state.usage, estimateTokens(state.thinkingChars))

function finalChunk(x: Translation): ChatChunk {
  x.state.usageSent = true
  return usageChunk(x.id, x.meta, usageOf(x.state))
}

/** Usage is cumulative: each count replaces the one before, never adds. */
function mergeUsage(state: AnthropicStreamState, u: Record<string, unknown> | undefined): void {
  if (!u) return
  for (const [k, v] of Object.entries(u)) {
    if (typeof v === 'number') (state.usage as Record<string, number>)[k] = v
    else if (k === 'output_tokens_details' && v && typeof v === 'object') {
      state.usage.output_tokens_details = v as AnthropicUsage['output_tokens_details']
    } else if (k === 'iterations' && Array.isArray(v)) {
      // Compaction: the per-iteration counts, cumulative like the rest (toUsage sums them).
      state.usage.iterations = v as AnthropicUsage['iterations']
    }
  }
}

function violate(state: AnthropicStreamState, what: string): ChatChunk[] {
  state.violation ??= what
  return []
}

/** The stop reason (with a refusal's reason first): the answer's last delta. */
function finish(
  x: Translation,
  reason: string,
  details: AnthropicStopDetails | null | undefined,
  sequence?: string | null,
): ChatChunk[] {
  x.state.finishReason = mapStopReason(reason)
  const out: ChatChunk[] = []
  if (reason === 'refusal') out.push(chunk(x, { refusal: refusalText(details) }))
  const last = chunk(x, {}, x.state.finishReason)
  Object.assign(last.choices[0]!, matchedStop(reason, sequence))
  out.push(last)
  return out
}

const detail = (x: Translation, d: ReasoningDetail): ChatChunk => chunk(x, { reasoning_details: [d] })

type EventOf<T extends AnthropicEvent['type']> = Extract<AnthropicEvent, { type: T }>

function onMessageStart(x: Translation, event: EventOf<'message_start'>): ChatChunk[] {
  const { state } = x
  if (state.started && !state.stopped) {
    if (event.message.id === state.messageId) return []
    return violate(state, 'a second message_start before message_stop')
  }
  if (state.stopped) return violate(state, 'message_start after message_stop')
  state.started = true
  state.messageId = event.message.id
  x.id = event.message.id || x.id
  mergeUsage(state, event.message.usage)
  const out = [chunk(x, { role: 'assistant', content: '' })]
  // A message that arrives whole: its content and stop reason are in message_start.
  for (const [i, block] of (event.message.content ?? []).entries()) {
    out.push(...startBlock(x, -1 - i, block), ...stopBlock(x, -1 - i))
  }
  const stop = event.message.stop_reason
  if (stop !== undefined && stop !== null)
    out.push(...finish(x, stop, event.message.stop_details, event.message.stop_sequence))
  return out
}

function onBlockDelta(x: Translation, event: EventOf<'content_block_delta'>): ChatChunk[] {
  const open = x.state.blocks.get(event.index)
  if (!open) return violate(x.state, `content_block_delta for block ${event.index}, which is not open`)
  const d = event.delta
  if (d.type === 'text_delta') return [chunk(x, { content: (d as { text: string }).text })]
  if (d.type === 'input_json_delta' && open.toolIndex !== undefined) {
    const partial = (d as { partial_json: string }).partial_json
    if (partial === '') return []
    open.argsSent = true
    return [chunk(x, { tool_calls: [{ index: open.toolIndex, function: { arguments: partial } }] })]
  }
  if (d.type === 'thinking_delta') return onThinking(x, open, (d as { thinking: string }).thinking)
  if (d.type === 'signature_delta')
    open.signature = (open.signature ?? '') + (d as { signature: string }).signature
  return []
}

function translateEvent(x: Translation, event: AnthropicEvent): ChatChunk[] {
  const { state } = x
  switch (event.type) {
    case 'message_start':
      return onMessageStart(x, event)

    case 'content_block_start':
      if (!state.started || state.stopped) return violate(state, 'content_block_start outside a message')
      return startBlock(x, event.index, event.content_block)

    case 'content_block_delta':
      return onBlockDelta(x, event)

    case 'content_block_stop':
      if (!state.blocks.has(event.index)) {
        return violate(state, `content_block_stop for block ${event.index}, which is not open`)
      }
      return stopBlock(x, event.index)

    case 'message_delta':
      if (!state.started || state.stopped) return violate(state, 'message_delta outside a message')
      mergeUsage(state, event.usage)
      if (event.delta.stop_reason === undefined || event.delta.stop_reason === null) return []
      return finish(x, event.delta.stop_reason, event.delta.stop_details, event.delta.stop_sequence)

    case 'message_stop':
      if (!state.started) return violate(state, 'message_stop before message_start')
      state.stopped = true
      if (state.finishReason === null) return violate(state, 'message_stop without a stop reason')
      return state.usageSent ? [] : [finalChunk(x)]

    // ping: keep-alive; error: the adapter turns it into a GatewayError before it gets here.
    default:
      return []
  }
}

function startBlock(x: Translation, index: number, b: AnthropicResponseBlock): ChatChunk[] {
  const open: OpenBlock = { type: b.type }
  x.state.blocks.set(index, open)
  if (b.type === 'tool_use') {
    const tb = b as { id: string; name: string; input?: unknown }
    open.input = tb.input
    open.toolIndex = x.state.toolCalls++
    return [
      chunk(x, {
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
    return start === '' ? [] : onThinking(x, open, start)
  }
  if (b.type === 'redacted_thinking') open.data = (b as { data: string }).data
  if (b.type === 'text') {
    const start = (b as { text: string }).text
    return start === '' ? [] : [chunk(x, { content: start })]
  }
  return []
}

function stopBlock(x: Translation, index: number): ChatChunk[] {
  const { state } = x
  const open = state.blocks.get(index)
  state.blocks.delete(index)
  // A tool whose input came whole (in content_block_start, or as one empty delta): the arguments a
  // client reassembles must still be its input's JSON, `{}` for none.
  if (open?.toolIndex !== undefined && !open.argsSent) {
    const args = JSON.stringify(open.input ?? {})
    return [chunk(x, { tool_calls: [{ index: open.toolIndex, function: { arguments: args } }] })]
  }
  // A thinking block's detail goes out whole once its signature is known: a client that
  // sends it back needs text and signature together.
  if (open?.type === 'thinking' && !x.options.excludeReasoning) {
    return [detail(x, thinkingDetail(open.thinking ?? '', open.signature, state.reasoningDetails++))]
  }
  if (open?.type === 'redacted_thinking' && open.data !== undefined) {
    return [detail(x, redactedDetail(open.data, state.reasoningDetails++))]
  }
  return []
}

function onThinking(x: Translation, open: OpenBlock, text: string): ChatChunk[] {
  open.thinking = (open.thinking ?? '') + text
  x.state.thinkingChars += text.length
  if (x.options.excludeReasoning || text === '') return []
  return [chunk(x, { reasoning: text })]
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
  const x: Translation = { state, meta, options, id: meta.id }
  return Object.assign((event: AnthropicEvent) => translateEvent(x, event), {
    end: (): ChatChunk[] => (state.finishReason !== null && !state.usageSent ? [finalChunk(x)] : []),
    state,
    usage: () => usageOf(state),
  })
}

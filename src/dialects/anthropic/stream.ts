import { ANTHROPIC_REASONING_FORMAT } from '../../providers/anthropic/request.ts'
import { encodeForeignDetail, stopOf, toAnthropicUsage, toStop } from './response.ts'
import type { ChatChunk, FinishReason, ReasoningDetail, Usage } from '../../domain/chat.ts'

// The internal chat chunks → Anthropic Messages stream events, as they arrive. Pure apart from the
// state it keeps. The sequence Anthropic documents and its SDK reads: message_start, ping, then per
// content block content_block_start / content_block_delta… / content_block_stop (one block open at a
// time), then message_delta (stop_reason, usage) and message_stop.
// https://docs.anthropic.com/en/docs/build-with-claude/streaming
//
// The pieces below each take the translator's state and push onto the batch's `out`: the blocks
// (openBlock, closeBlock, ensureBlock), what a chunk carries (onDetail, onToolCall, onChunk), and the
// message's ends (messageStart, translateBatch, endMessage). `createEventTranslator` makes the state
// and hands out the function over it.

export type AnthropicStreamEvent = { type: string; [key: string]: unknown }

export interface MessageMeta {
  id: string
  model: string
  /** The request's stop_sequences, to tell a matched one. */
  stops?: readonly string[]
}

type OpenKind = 'text' | 'thinking' | 'tool_use'

export interface EventTranslatorState {
  started: boolean
  /** The next content block's index. */
  nextIndex: number
  /** The block open now, if any. */
  open?: { kind: OpenKind; index: number }
  /** Block index of each tool call, by its index in the chunks. */
  toolBlocks: Map<number, number>
  finishReason: FinishReason | null
  /** The client's stop sequence that ended the answer, when the upstream named it. */
  stopSequence: string | null
  usage?: Usage
  ended: boolean
}

export interface EventTranslator {
  (batch: readonly ChatChunk[]): AnthropicStreamEvent[]
  /** After the last chunk: the open block's stop, message_delta and message_stop. */
  end(): AnthropicStreamEvent[]
  readonly state: EventTranslatorState
  /** The message's id and model, as the translator was made with. */
  readonly meta: MessageMeta
}

type Out = AnthropicStreamEvent[]
type ToolCallDelta = NonNullable<ChatChunk['choices'][number]['delta']['tool_calls']>[number]

function closeBlock(state: EventTranslatorState, out: Out): void {
  if (!state.open) return
  out.push({ type: 'content_block_stop', index: state.open.index })
  state.open = undefined
}

function openBlock(
  state: EventTranslatorState,
  out: Out,
  kind: OpenKind,
  block: Record<string, unknown>,
): number {
  closeBlock(state, out)
  const index = state.nextIndex++
  state.open = { kind, index }
  out.push({ type: 'content_block_start', index, content_block: block })
  return index
}

/** The open block of `kind`, opened if another (or none) is. */
function ensureBlock(state: EventTranslatorState, out: Out, kind: 'text' | 'thinking'): number {
  if (state.open?.kind === kind) return state.open.index
  return openBlock(
    state,
    out,
    kind,
    kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' },
  )
}

function onDetail(state: EventTranslatorState, out: Out, d: ReasoningDetail): void {
  const foreign = d.format !== ANTHROPIC_REASONING_FORMAT && d.type !== 'reasoning.text'
  if (foreign || (d.type === 'reasoning.encrypted' && typeof d.data === 'string')) {
    // Another provider's opaque detail travels whole (see encodeForeignDetail).
    const data = foreign ? encodeForeignDetail(d) : (d.data as string)
    openBlock(state, out, 'thinking', { type: 'redacted_thinking', data })
    closeBlock(state, out)
    return
  }
  if (d.type !== 'reasoning.text') return
  // A thinking block's detail comes whole at its end, after its text streamed as `reasoning`: only
  // the signature is new then. Without streamed text first, the detail is the whole block.
  const streamed = state.open?.kind === 'thinking'
  const index = ensureBlock(state, out, 'thinking')
  if (!streamed && d.text) {
    out.push({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: d.text } })
  }
  if (d.format === ANTHROPIC_REASONING_FORMAT && typeof d.signature === 'string' && d.signature !== '') {
    out.push({
      type: 'content_block_delta',
      index,
      delta: { type: 'signature_delta', signature: d.signature },
    })
  }
  closeBlock(state, out)
}

/** A tool call's first delta opens its tool_use block; its arguments stream into that block. */
function onToolCall(state: EventTranslatorState, out: Out, call: ToolCallDelta): void {
  let index = state.toolBlocks.get(call.index)
  if (index === undefined) {
    index = openBlock(state, out, 'tool_use', {
      type: 'tool_use',
      id: call.id ?? `toolu_${call.index}`,
      name: call.function?.name ?? '',
      input: {},
    })
    state.toolBlocks.set(call.index, index)
  }
  const args = call.function?.arguments
  if (args) {
    out.push({
      type: 'content_block_delta',
      index,
      delta: { type: 'input_json_delta', partial_json: args },
    })
  }
}

function onChunk(state: EventTranslatorState, meta: MessageMeta, out: Out, chunk: ChatChunk): void {
  if (chunk.usage) state.usage = chunk.usage
  const choice = chunk.choices[0]
  if (!choice) return
  const d = choice.delta
  if (typeof d.reasoning === 'string' && d.reasoning !== '') {
    const index = ensureBlock(state, out, 'thinking')
    out.push({
      type: 'content_block_delta',
      index,
      delta: { type: 'thinking_delta', thinking: d.reasoning },
    })
  }
  for (const detail of d.reasoning_details ?? []) onDetail(state, out, detail)
  if (typeof d.content === 'string' && d.content !== '') {
    const index = ensureBlock(state, out, 'text')
    out.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: d.content } })
  }
  for (const call of d.tool_calls ?? []) onToolCall(state, out, call)
  if (choice.finish_reason) {
    state.finishReason = choice.finish_reason
    state.stopSequence = stopOf(choice, meta.stops)
    closeBlock(state, out)
  }
}

/** message_start and a ping: what goes out before the first chunk's events. */
function messageStart(meta: MessageMeta, batch: readonly ChatChunk[]): Out {
  return [
    {
      type: 'message_start',
      message: {
        id: meta.id,
        type: 'message',
        role: 'assistant',
        // The relay names the model that answered in each chunk.
        model: batch[0]?.model || meta.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // The counts come with message_delta, once the upstream has given them.
        usage: { input_tokens: 0, output_tokens: 0 },
      },
    },
    { type: 'ping' },
  ]
}

function translateBatch(state: EventTranslatorState, meta: MessageMeta, batch: readonly ChatChunk[]): Out {
  const out: Out = []
  if (!state.started) {
    state.started = true
    out.push(...messageStart(meta, batch))
  }
  for (const chunk of batch) onChunk(state, meta, out, chunk)
  return out
}

/** The open block's stop, message_delta and message_stop; once. */
function endMessage(state: EventTranslatorState, meta: MessageMeta): Out {
  if (state.ended) return []
  const out = state.started ? [] : translateBatch(state, meta, [])
  state.ended = true
  closeBlock(state, out)
  out.push(
    {
      type: 'message_delta',
      delta: toStop(state.finishReason, state.stopSequence),
      // Cumulative whole-message counts, as Anthropic's own message_delta carries them.
      usage: toAnthropicUsage(state.usage),
    },
    { type: 'message_stop' },
  )
  return out
}

export function createEventTranslator(meta: MessageMeta): EventTranslator {
  const state: EventTranslatorState = {
    started: false,
    nextIndex: 0,
    toolBlocks: new Map(),
    finishReason: null,
    stopSequence: null,
    ended: false,
  }
  return Object.assign((batch: readonly ChatChunk[]) => translateBatch(state, meta, batch), {
    end: (): Out => endMessage(state, meta),
    state,
    meta,
  })
}

import { ANTHROPIC_REASONING_FORMAT } from '../../providers/anthropic/request.ts'
import { encodeForeignDetail, stopOf, toAnthropicUsage, toStop } from './response.ts'
import type { ChatChunk, FinishReason, ReasoningDetail, Usage } from '../../domain/chat.ts'

// The internal chat chunks → Anthropic Messages stream events, as they arrive. Pure apart from the
// state it keeps. The sequence Anthropic documents and its SDK reads: message_start, ping, then per
// content block content_block_start / content_block_delta… / content_block_stop (one block open at a
// time), then message_delta (stop_reason, usage) and message_stop.
// https://docs.anthropic.com/en/docs/build-with-claude/streaming

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

export function createEventTranslator(meta: MessageMeta): EventTranslator {
  const state: EventTranslatorState = {
    started: false,
    nextIndex: 0,
    toolBlocks: new Map(),
    finishReason: null,
    stopSequence: null,
    ended: false,
  }

  const close = (out: AnthropicStreamEvent[]): void => {
    if (!state.open) return
    out.push({ type: 'content_block_stop', index: state.open.index })
    state.open = undefined
  }
  const open = (out: AnthropicStreamEvent[], kind: OpenKind, block: Record<string, unknown>): number => {
    close(out)
    const index = state.nextIndex++
    state.open = { kind, index }
    out.push({ type: 'content_block_start', index, content_block: block })
    return index
  }
  /** The open block of `kind`, opened if another (or none) is. */
  const ensure = (out: AnthropicStreamEvent[], kind: 'text' | 'thinking'): number => {
    if (state.open?.kind === kind) return state.open.index
    return open(
      out,
      kind,
      kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' },
    )
  }

  const onDetail = (out: AnthropicStreamEvent[], d: ReasoningDetail): void => {
    const foreign = d.format !== ANTHROPIC_REASONING_FORMAT && d.type !== 'reasoning.text'
    if (foreign || (d.type === 'reasoning.encrypted' && typeof d.data === 'string')) {
      // Another provider's opaque detail travels whole (see encodeForeignDetail).
      const data = foreign ? encodeForeignDetail(d) : (d.data as string)
      open(out, 'thinking', { type: 'redacted_thinking', data })
      close(out)
      return
    }
    if (d.type !== 'reasoning.text') return
    // A thinking block's detail comes whole at its end, after its text streamed as `reasoning`: only
    // the signature is new then. Without streamed text first, the detail is the whole block.
    const streamed = state.open?.kind === 'thinking'
    const index = ensure(out, 'thinking')
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
    close(out)
  }

  const onChunk = (out: AnthropicStreamEvent[], chunk: ChatChunk): void => {
    if (chunk.usage) state.usage = chunk.usage
    const choice = chunk.choices[0]
    if (!choice) return
    const d = choice.delta
    if (typeof d.reasoning === 'string' && d.reasoning !== '') {
      const index = ensure(out, 'thinking')
      out.push({
        type: 'content_block_delta',
        index,
        delta: { type: 'thinking_delta', thinking: d.reasoning },
      })
    }
    for (const detail of d.reasoning_details ?? []) onDetail(out, detail)
    if (typeof d.content === 'string' && d.content !== '') {
      const index = ensure(out, 'text')
      out.push({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: d.content } })
    }
    for (const call of d.tool_calls ?? []) {
      let index = state.toolBlocks.get(call.index)
      if (index === undefined) {
        index = open(out, 'tool_use', {
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
    if (choice.finish_reason) {
      state.finishReason = choice.finish_reason
      state.stopSequence = stopOf(choice, meta.stops)
      close(out)
    }
  }

  const translate = (batch: readonly ChatChunk[]): AnthropicStreamEvent[] => {
    const out: AnthropicStreamEvent[] = []
    if (!state.started) {
      state.started = true
      out.push(
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
      )
    }
    for (const chunk of batch) onChunk(out, chunk)
    return out
  }

  return Object.assign(translate, {
    end(): AnthropicStreamEvent[] {
      if (state.ended) return []
      const out = state.started ? [] : translate([])
      state.ended = true
      close(out)
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
    },
    state,
    meta,
  })
}

import type { ChatCompletion, FinishReason, ReasoningDetail, ToolCall, Usage } from '../types.ts'
import type { ChunkMeta } from '../shared/stream.ts'
import { ANTHROPIC_REASONING_FORMAT } from './request.ts'
import type { AnthropicMessage, AnthropicUsage } from './wire.ts'

// Anthropic Message → OpenAI chat completion. Pure.

export interface TranslateOptions {
  /** `reasoning.exclude`: no reasoning text in the answer (redacted blocks, being opaque, stay). */
  excludeReasoning?: boolean
}

/** https://docs.anthropic.com/en/docs/build-with-claude/handling-stop-reasons */
export function mapStopReason(r: string | null | undefined): FinishReason {
  switch (r) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length'
    case 'tool_use':
      return 'tool_calls'
    case 'refusal':
      return 'content_filter'
    // end_turn, stop_sequence, pause_turn, and reasons newer than this code
    default:
      return 'stop'
  }
}

/**
 * Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's prompt_tokens includes
 * them. Thinking is part of `output_tokens` and not reported apart: `reasoningTokens` is Junction's
 * estimate from the thinking text it saw (a lower bound: Claude 4 returns summarised thinking).
 */
export function toUsage(u: Partial<AnthropicUsage>, reasoningTokens = 0): Usage {
  const cacheRead = u.cache_read_input_tokens ?? 0
  const cacheWrite = u.cache_creation_input_tokens ?? 0
  const prompt = (u.input_tokens ?? 0) + cacheRead + cacheWrite
  const completion = u.output_tokens ?? 0
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cacheRead, cache_write_tokens: cacheWrite },
    completion_tokens_details: { reasoning_tokens: Math.min(reasoningTokens, completion) },
  }
}

/** About four characters a token: only for the reasoning share, which Anthropic does not report. */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 4)
}

export function fromAnthropicMessage(
  msg: AnthropicMessage,
  meta: ChunkMeta,
  options: TranslateOptions = {},
): ChatCompletion {
  let text = ''
  let hasText = false
  let reasoning = ''
  let thinkingChars = 0
  const details: ReasoningDetail[] = []
  const toolCalls: ToolCall[] = []
  for (const block of msg.content) {
    if (block.type === 'text') {
      text += (block as { text: string }).text
      hasText = true
    } else if (block.type === 'tool_use') {
      const b = block as { id: string; name: string; input: unknown }
      toolCalls.push({
        id: b.id,
        type: 'function',
        function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) },
      })
    } else if (block.type === 'thinking') {
      const b = block as { thinking: string; signature?: string }
      thinkingChars += b.thinking.length
      if (options.excludeReasoning) continue
      reasoning += b.thinking
      details.push(thinkingDetail(b.thinking, b.signature, details.length))
    } else if (block.type === 'redacted_thinking') {
      details.push(redactedDetail((block as { data: string }).data, details.length))
    }
  }
  const message: ChatCompletion['choices'][number]['message'] = {
    role: 'assistant',
    content: hasText || toolCalls.length === 0 ? text : null,
    refusal: null,
  }
  if (toolCalls.length > 0) message.tool_calls = toolCalls
  if (reasoning !== '') message.reasoning = reasoning
  if (details.length > 0) message.reasoning_details = details
  return {
    id: msg.id,
    object: 'chat.completion',
    created: meta.created,
    model: msg.model ?? meta.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: mapStopReason(msg.stop_reason) }],
    usage: toUsage(msg.usage, estimateTokens(thinkingChars)),
  }
}

export function thinkingDetail(text: string, signature: string | undefined, index: number): ReasoningDetail {
  const d: ReasoningDetail = { type: 'reasoning.text', text, format: ANTHROPIC_REASONING_FORMAT, index }
  if (signature) d.signature = signature
  return d
}

export function redactedDetail(data: string, index: number): ReasoningDetail {
  return { type: 'reasoning.encrypted', data, format: ANTHROPIC_REASONING_FORMAT, index }
}

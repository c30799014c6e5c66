import type { ChunkMeta } from '../shared/stream.ts'
import { ANTHROPIC_REASONING_FORMAT } from './request.ts'
import type { AnthropicMessage, AnthropicStopDetails, AnthropicUsage } from './wire.ts'
import type { ChatCompletion, FinishReason, ReasoningDetail, ToolCall, Usage } from '../../domain/chat.ts'

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
 * The stop sequence that ended the answer, kept on the choice as `stop_reason` (vLLM's field for
 * it), so the Messages dialect can answer `stop_reason: "stop_sequence"` with the sequence.
 */
export function matchedStop(
  reason: string | null | undefined,
  sequence: string | null | undefined,
): { stop_reason?: string } {
  return reason === 'stop_sequence' && typeof sequence === 'string' ? { stop_reason: sequence } : {}
}

/**
 * Anthropic counts cache reads and writes apart from `input_tokens`; OpenAI's prompt_tokens includes
 * them. Thinking is part of `output_tokens`: recent models report its share as
 * `output_tokens_details.thinking_tokens`, used when present. Otherwise `estimatedReasoning` (Junction's
 * estimate from the thinking text it saw, a lower bound: Claude 4 returns summarised thinking) is
 * reported, marked `reasoning_tokens_estimated: true`.
 */
export function toUsage(usage: Partial<AnthropicUsage>, estimatedReasoning = 0): Usage {
  const u = withIterations(usage)
  const cacheRead = u.cache_read_input_tokens ?? 0
  const cacheWrite = u.cache_creation_input_tokens ?? 0
  const prompt = (u.input_tokens ?? 0) + cacheRead + cacheWrite
  const completion = u.output_tokens ?? 0
  const reported = u.output_tokens_details?.thinking_tokens
  const details: NonNullable<Usage['completion_tokens_details']> =
    typeof reported === 'number'
      ? { reasoning_tokens: Math.min(reported, completion) }
      : { reasoning_tokens: Math.min(estimatedReasoning, completion) }
  if (typeof reported !== 'number' && estimatedReasoning > 0) details['reasoning_tokens_estimated'] = true
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cacheRead, cache_write_tokens: cacheWrite },
    completion_tokens_details: details,
  }
}

/**
 * The usage to bill: with compaction, the top-level counts are the last iteration's only, so each count
 * is the sum over `iterations` (every type: the upstream billed each one), never below the top-level one.
 * A reported thinking share is summed alike. Without iterations, the usage as it is.
 */
export function withIterations(u: Partial<AnthropicUsage>): Partial<AnthropicUsage> {
  const its = u.iterations
  if (!its || its.length === 0) return u
  const sum = (
    k: 'input_tokens' | 'output_tokens' | 'cache_creation_input_tokens' | 'cache_read_input_tokens',
  ) =>
    Math.max(
      u[k] ?? 0,
      its.reduce((acc, it) => acc + (it[k] ?? 0), 0),
    )
  const thinking = its.map((it) => it.output_tokens_details?.thinking_tokens)
  const reported = thinking.some((t) => typeof t === 'number')
  return {
    ...u,
    input_tokens: sum('input_tokens'),
    output_tokens: sum('output_tokens'),
    cache_creation_input_tokens: sum('cache_creation_input_tokens'),
    cache_read_input_tokens: sum('cache_read_input_tokens'),
    ...(reported
      ? {
          output_tokens_details: {
            ...u.output_tokens_details,
            thinking_tokens: Math.max(
              u.output_tokens_details?.thinking_tokens ?? 0,
              thinking.reduce<number>((acc, t) => acc + (t ?? 0), 0),
            ),
          },
        }
      : {}),
  }
}

/**
 * A refusal's reason as OpenAI clients read it (`message.refusal`): the explanation, else the
 * category; a generic sentence when the upstream gave neither.
 */
export function refusalText(d: AnthropicStopDetails | null | undefined): string {
  if (d?.explanation) return d.explanation
  if (d?.category) return `The model declined to answer (category: ${d.category}).`
  return 'The model declined to answer.'
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
    // A refusal without text is OpenAI's shape: no content, the reason in `refusal`.
    content: hasText || (toolCalls.length === 0 && msg.stop_reason !== 'refusal') ? text : null,
    refusal: msg.stop_reason === 'refusal' ? refusalText(msg.stop_details) : null,
  }
  if (toolCalls.length > 0) message.tool_calls = toolCalls
  if (reasoning !== '') message.reasoning = reasoning
  if (details.length > 0) message.reasoning_details = details
  return {
    id: msg.id,
    object: 'chat.completion',
    created: meta.created,
    model: msg.model ?? meta.model,
    choices: [
      {
        index: 0,
        message,
        logprobs: null,
        finish_reason: mapStopReason(msg.stop_reason),
        ...matchedStop(msg.stop_reason, msg.stop_sequence),
      },
    ],
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

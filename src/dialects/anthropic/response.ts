import { ANTHROPIC_REASONING_FORMAT } from '../../providers/anthropic/request.ts'
import { ANTHROPIC_NATIVE_ANSWER, type AnthropicMessage } from '../../providers/anthropic/wire.ts'
import type { ChatCompletion, FinishReason, ReasoningDetail, Usage } from '../../domain/chat.ts'

// The internal chat completion → an Anthropic Messages answer. Pure.
// https://docs.anthropic.com/en/api/messages (the response object)

export type AnthropicStopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal'

export interface AnthropicUsageOut {
  input_tokens: number
  output_tokens: number
  cache_creation_input_tokens: number
  cache_read_input_tokens: number
}

export type AnthropicBlockOut =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'redacted_thinking'; data: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }

export interface AnthropicMessageOut {
  id: string
  type: 'message'
  role: 'assistant'
  model: string
  content: AnthropicBlockOut[]
  stop_reason: AnthropicStopReason | null
  stop_sequence: string | null
  usage: AnthropicUsageOut
}

/** A finish reason as Anthropic's stop reason; a matched stop sequence is told apart by `stopOf`. */
export function toStopReason(r: FinishReason | null | undefined): AnthropicStopReason | null {
  switch (r) {
    case 'length':
      return 'max_tokens'
    case 'tool_calls':
    case 'function_call':
      return 'tool_use'
    case 'content_filter':
      return 'refusal'
    case 'stop':
      return 'end_turn'
    default:
      return null
  }
}

/**
 * The client's stop sequence that ended the answer, when the upstream names it: Anthropic does
 * (`stop_sequence`), vLLM and the mock do (the choice's `stop_reason`). OpenAI and Gemini answer a
 * stop sequence as a plain stop, so it is not knowable there: the answer says `end_turn` (docs/clients/messages.md).
 * Only one of the client's own sequences counts (vLLM also names its model's stop strings).
 */
export function stopOf(
  choice: { finish_reason: FinishReason | null; [key: string]: unknown } | undefined,
  stops: readonly string[] | undefined,
): string | null {
  const matched = choice?.['stop_reason']
  if (choice?.finish_reason !== 'stop' || typeof matched !== 'string') return null
  return stops?.includes(matched) ? matched : null
}

/** The stop reason and sequence of an answer that finished with `finish`. */
export function toStop(
  finish: FinishReason | null | undefined,
  sequence: string | null,
): { stop_reason: AnthropicStopReason; stop_sequence: string | null } {
  if (sequence !== null) return { stop_reason: 'stop_sequence', stop_sequence: sequence }
  return { stop_reason: toStopReason(finish ?? 'stop') ?? 'end_turn', stop_sequence: null }
}

/** OpenAI's prompt_tokens includes cached and cache-written tokens; Anthropic counts them apart. */
export function toAnthropicUsage(u: Usage | undefined | null): AnthropicUsageOut {
  const cacheRead = u?.prompt_tokens_details?.cached_tokens ?? 0
  const write = u?.prompt_tokens_details?.['cache_write_tokens']
  const cacheWrite = typeof write === 'number' ? write : 0
  return {
    input_tokens: Math.max(0, (u?.prompt_tokens ?? 0) - cacheRead - cacheWrite),
    output_tokens: u?.completion_tokens ?? 0,
    cache_creation_input_tokens: cacheWrite,
    cache_read_input_tokens: cacheRead,
  }
}

/**
 * Another provider's opaque reasoning detail (Gemini's thought signatures, encrypted reasoning) has no
 * Anthropic block of its own: it travels as a `redacted_thinking` block whose data is the detail
 * itself, under this prefix, so a client that sends its blocks back (as Anthropic's clients do)
 * gives the upstream its detail back unchanged.
 */
export const FOREIGN_DETAIL_PREFIX = 'junction.detail.v1:'

export function encodeForeignDetail(d: ReasoningDetail): string {
  return FOREIGN_DETAIL_PREFIX + Buffer.from(JSON.stringify(d), 'utf8').toString('base64url')
}

/** The detail a `redacted_thinking` block's data encodes, or undefined for Claude's own data. */
export function decodeForeignDetail(data: string): ReasoningDetail | undefined {
  if (!data.startsWith(FOREIGN_DETAIL_PREFIX)) return undefined
  try {
    const value: unknown = JSON.parse(
      Buffer.from(data.slice(FOREIGN_DETAIL_PREFIX.length), 'base64url').toString('utf8'),
    )
    return typeof value === 'object' &&
      value !== null &&
      typeof (value as { type?: unknown }).type === 'string'
      ? (value as ReasoningDetail)
      : undefined
  } catch {
    return undefined
  }
}

/** Thinking blocks from reasoning details: Claude's own keep their signature; others have none. */
export function toThinkingBlocks(
  details: ReasoningDetail[] | undefined,
  reasoning: string | undefined,
): AnthropicBlockOut[] {
  const blocks = [...(details ?? [])]
    .sort((a, b) => (a.index ?? 0) - (b.index ?? 0))
    .flatMap((d): AnthropicBlockOut[] => {
      if (d.type === 'reasoning.text') {
        const signature = d.format === ANTHROPIC_REASONING_FORMAT ? (d.signature ?? '') : ''
        return [{ type: 'thinking', thinking: d.text ?? '', signature }]
      }
      if (d.format !== ANTHROPIC_REASONING_FORMAT)
        return [{ type: 'redacted_thinking', data: encodeForeignDetail(d) }]
      if (d.type === 'reasoning.encrypted' && typeof d.data === 'string') {
        return [{ type: 'redacted_thinking', data: d.data }]
      }
      return []
    })
  if (blocks.length > 0) return blocks
  return reasoning ? [{ type: 'thinking', thinking: reasoning, signature: '' }] : []
}

/** A tool call's arguments as the object Anthropic's `input` is; what is not a JSON object is `{}`. */
export function toToolInput(args: string): unknown {
  try {
    const value: unknown = JSON.parse(args)
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? value : {}
  } catch {
    return {}
  }
}

/** `stops`: the request's stop_sequences, to tell a matched one (see stopOf). */
export function toAnthropicMessage(c: ChatCompletion, stops?: readonly string[]): AnthropicMessageOut {
  // An Anthropic upstream's own answer to the client's own body goes back as it came: our id and slug.
  const native = (c as { [ANTHROPIC_NATIVE_ANSWER]?: AnthropicMessage })[ANTHROPIC_NATIVE_ANSWER]
  if (native !== undefined) {
    return {
      ...native,
      id: c.id,
      type: 'message',
      role: 'assistant',
      model: c.model,
      stop_reason: (native.stop_reason ?? null) as AnthropicStopReason | null,
      stop_sequence: native.stop_sequence ?? null,
      usage: { ...toAnthropicUsage(c.usage), ...native.usage } as AnthropicUsageOut,
    } as AnthropicMessageOut
  }
  const choice = c.choices[0]
  const m = choice?.message
  const content: AnthropicBlockOut[] = toThinkingBlocks(m?.reasoning_details, m?.reasoning)
  if (typeof m?.content === 'string' && m.content !== '') content.push({ type: 'text', text: m.content })
  for (const call of m?.tool_calls ?? []) {
    content.push({
      type: 'tool_use',
      id: call.id,
      name: call.function.name,
      input: toToolInput(call.function.arguments),
    })
  }
  return {
    id: c.id,
    type: 'message',
    role: 'assistant',
    model: c.model,
    content,
    ...toStop(choice?.finish_reason, stopOf(choice, stops)),
    usage: toAnthropicUsage(c.usage),
  }
}

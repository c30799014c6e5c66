import type { OpenAIChunk, OpenAICompletion, openAIEmbeddingsSchema } from './wire.ts'
import type { z } from 'zod'
import type { ChatChunk, ChatCompletion, EmbeddingsResponse, FinishReason } from '../../domain/chat.ts'

const finishReasons = new Set<FinishReason>([
  'stop',
  'length',
  'tool_calls',
  'content_filter',
  'function_call',
])

/** Providers invent their own reasons (e.g. `eos`); anything unknown that ended normally is `stop`. */
export function toFinishReason(r: string | null | undefined): FinishReason | null {
  if (r === null || r === undefined) return null
  return finishReasons.has(r as FinishReason) ? (r as FinishReason) : 'stop'
}

/** DeepSeek and vLLM send reasoning as `reasoning_content`; Junction's field is `reasoning`. */
function liftReasoning<T extends Record<string, unknown>>(m: T): T {
  if (typeof m.reasoning_content === 'string' && m.reasoning === undefined) {
    const { reasoning_content, ...rest } = m
    return { ...rest, reasoning: reasoning_content } as unknown as T
  }
  return m
}

export function fromOpenAICompletion(c: OpenAICompletion, now: number): ChatCompletion {
  return {
    ...c,
    id: c.id ?? '',
    object: 'chat.completion',
    created: c.created ?? Math.floor(now / 1000),
    model: c.model ?? '',
    choices: c.choices.map((ch) => ({
      ...ch,
      message: { ...liftReasoning(ch.message), role: 'assistant', content: ch.message.content ?? null },
      logprobs: ch.logprobs ?? null,
      finish_reason: toFinishReason(ch.finish_reason),
    })),
    usage: c.usage ?? undefined,
  } as ChatCompletion
}

/**
 * A stream chunk in Junction's shape, changed in place: the chunk was parsed from its event's data
 * and nothing else holds it, and a stream has hundreds of them (a copy of each, its choices and their
 * deltas was most of a stream's garbage). Assigning a key keeps it where the upstream put it and
 * appends a missing one, as the spread copy did, so the chunk serialises to the same text.
 */
export function fromOpenAIChunk(c: OpenAIChunk, now: number): ChatChunk {
  c.id = typeof c.id === 'string' ? c.id : ''
  c.object = 'chat.completion.chunk'
  c.created = typeof c.created === 'number' ? c.created : Math.floor(now / 1000)
  c.model = typeof c.model === 'string' ? c.model : ''
  for (const ch of c.choices) {
    ch.delta = liftReasoning(ch.delta ?? {})
    ch.finish_reason = toFinishReason(ch.finish_reason)
  }
  return c as unknown as ChatChunk
}

export function fromOpenAIEmbeddings(
  r: z.infer<typeof openAIEmbeddingsSchema>,
  model: string,
): EmbeddingsResponse {
  return {
    ...r,
    object: 'list',
    data: r.data.map((d) => ({ ...d, object: 'embedding' as const })),
    model,
    usage: r.usage ?? { prompt_tokens: 0, total_tokens: 0 },
  }
}

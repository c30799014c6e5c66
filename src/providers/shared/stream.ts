import type { ChatChunk, FinishReason, Usage } from '../../domain/chat.ts'

// The OpenAI chunks every stream translator builds the same way, whatever its upstream protocol. Pure.

/** What a translator stamps on each chunk (and on a blocking answer). */
export interface ChunkMeta {
  /** Replaced by the route with the generation id. */
  id: string
  model: string
  /** Unix seconds. */
  created: number
}

/** The meta of an answer that starts now; the id comes later (the upstream's, then the route's). */
export function newChunkMeta(model: string, now: number): ChunkMeta {
  return { id: '', model, created: Math.floor(now / 1000) }
}

export type ChunkDelta = ChatChunk['choices'][number]['delta']

/**
 * The upstream's own stream events that produced a batch of chunks (in order, chunk-less ones
 * included), kept on the batch array under this symbol when a route answers in that upstream's own
 * dialect (a native /v1/messages request to Anthropic). Never serialised; absent on every other batch.
 */
export const UPSTREAM_EVENTS = Symbol('junction.upstream-events')

export type WithUpstreamEvents<T> = T & { [UPSTREAM_EVENTS]?: unknown[] }

/** The upstream events kept on a batch, if any. */
export function upstreamEventsOf(batch: readonly unknown[]): unknown[] | undefined {
  return (batch as WithUpstreamEvents<readonly unknown[]>)[UPSTREAM_EVENTS]
}

/** Keeps `events` on `batch` (after any it has). */
export function addUpstreamEvents<T extends unknown[]>(batch: T, events: readonly unknown[]): T {
  const b = batch as WithUpstreamEvents<T>
  const had = b[UPSTREAM_EVENTS]
  if (had) for (const e of events) had.push(e)
  else b[UPSTREAM_EVENTS] = [...events]
  return batch
}

/**
 * True for a chunk that carries something of the answer: output, a finish, or usage. Before the first
 * such chunk nothing is lost by retrying elsewhere; after it, the client must not see it twice.
 */
export function carriesAnswer(chunk: ChatChunk): boolean {
  if (chunk.usage) return true
  for (const c of chunk.choices) {
    const d = c.delta
    if (c.finish_reason || d.content || d.refusal || d.reasoning || (d.tool_calls?.length ?? 0) > 0)
      return true
  }
  return false
}

/** A chunk with one choice: `delta`, and on the last one the finish reason. */
export function deltaChunk(
  id: string,
  meta: ChunkMeta,
  delta: ChunkDelta,
  finish: FinishReason | null = null,
): ChatChunk {
  return {
    id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  }
}

/** The usage chunk that follows the finish: no choices, as OpenAI sends it with include_usage. */
export function usageChunk(id: string, meta: ChunkMeta, usage: Usage): ChatChunk {
  return { id, object: 'chat.completion.chunk', created: meta.created, model: meta.model, choices: [], usage }
}

/**
 * On a chunk made from an upstream event's text by an adapter's template (openai-compat's
 * stream-template.ts): the template, and the chunk's delta content as text and as JSON text (the
 * characters between the quotes, written as JSON.stringify writes them). The Chat Completions writer
 * splices `body` into the text it made of the template's first chunk. Never serialised.
 */
export const CHUNK_TEXT = Symbol('junction.chunk-text')

export interface ChunkTextOf {
  template: object
  body: string
  content: string
}

export type ChunkText = ChatChunk & { [CHUNK_TEXT]?: ChunkTextOf }

import type { ChatChunk } from '../../domain/chat.ts'
import { CHUNK_TEXT, type ChunkText } from '../shared/stream.ts'

// The fast path of an OpenAI-compatible stream. Nearly every event of a stream is the event before
// it with another piece of text: the same id, created, model, fingerprint, one choice whose delta is
// `{"content": "…"}`, the same finish_reason and usage. Such an event is recognised by its text: the
// text before and after the content's string is the same as a template's, learnt from an earlier
// event of the stream that went the slow way (parsed, checked, translated). Its chunk is then the
// template's translated chunk with the new content: what parsing and translating the event would
// have given, without either (an event's JSON.parse was about 40 % of its cost). The chunk carries
// the content's JSON text (CHUNK_TEXT), so that the Chat Completions writer can splice it into its
// own text instead of serialising the chunk again.

/** A template: an event's text around its content's string, and the chunk it translated to. */
export interface ChunkTemplate {
  /** The event's text up to and with the opening quote of the content's string. */
  before: string
  /** The event's text from the closing quote of the content's string. */
  after: string
  /** The event's translated chunk, as translated (nothing of the stream has changed it since). */
  chunk: ChatChunk
  /**
   * The chunk holds no object but its one choice and that choice's delta: a copy is then three spread
   * objects and an array (copyOf), not a walk of every value (cloneJson).
   */
  flat: boolean
}

/** The key that precedes a delta's content, as JSON.stringify writes it. */
const CONTENT_KEY = '"content":'

/** Past this many templates learnt, a stream whose events never match stops paying for new ones. */
const MAX_LEARNT = 8

/** A deep copy of a parsed JSON value (plain objects, arrays, primitives). */
export function cloneJson<T>(value: T): T {
  if (typeof value !== 'object' || value === null) return value
  if (Array.isArray(value)) {
    const copy = new Array<unknown>(value.length)
    for (let i = 0; i < value.length; i++) copy[i] = cloneJson(value[i] as unknown)
    return copy as T
  }
  const copy: Record<string, unknown> = {}
  for (const key in value) copy[key] = cloneJson((value as Record<string, unknown>)[key])
  return copy as T
}

/** No value of `o` is an object or an array, but for the key `except` when one is named. */
function flatBut(o: object, except?: string): boolean {
  for (const key in o) {
    if (key === except) continue
    const v = (o as Record<string, unknown>)[key]
    if (typeof v === 'object' && v !== null) return false
  }
  return true
}

/** Whether copyOf can copy `chunk`: one choice, and no object but it and its delta. */
function isFlat(chunk: ChatChunk): boolean {
  const choice = chunk.choices[0]
  return (
    chunk.choices.length === 1 &&
    choice !== undefined &&
    flatBut(chunk, 'choices') &&
    flatBut(choice, 'delta') &&
    flatBut(choice.delta)
  )
}

/** A copy of a flat template's chunk with another content (as cloneJson and an assignment give). */
function copyOf(chunk: ChatChunk, content: string): ChatChunk {
  const choice = chunk.choices[0]!
  return { ...chunk, choices: [{ ...choice, delta: { ...choice.delta, content } }] }
}

/**
 * Where a JSON string literal (`"…"`, quotes included, as JSON.stringify writes it) is the value of a
 * `content` key in `text`: the index of its opening quote, or -1 unless it is there exactly once.
 */
export function contentIndex(text: string, literal: string): number {
  const found = text.indexOf(CONTENT_KEY + literal)
  if (found < 0 || text.indexOf(CONTENT_KEY + literal, found + 1) >= 0) return -1
  return found + CONTENT_KEY.length
}

/** Characters that need a closer look in a string's JSON text: a quote, an escape, a control character. */
// eslint-disable-next-line no-control-regex
const SPECIAL = /["\\\u0000-\u001f]/
/** Escapes JSON.stringify never writes (it writes `/` and every other character as it is). */
const UNUSUAL_ESCAPE = /\\[u/]/

/**
 * The templates of one stream. `match` gives the chunk of an event that fits the current template,
 * or undefined (the event then goes the slow way). An event that went the slow way becomes the
 * template when `learnable` said so of its parse (before anything changed it) and `learn` is then
 * given its translation.
 */
export function createChunkTemplates(): {
  match(data: string): ChatChunk | undefined
  learnable(data: string, json: unknown): boolean
  learn(data: string, chunk: ChatChunk): void
} {
  let current: ChunkTemplate | undefined
  let learnt = 0
  return {
    match(data) {
      const t = current
      if (t === undefined) return undefined
      const end = data.length - t.after.length
      if (end < t.before.length) return undefined
      if (data.slice(0, t.before.length) !== t.before || data.slice(end) !== t.after) return undefined
      const body = data.slice(t.before.length, end)
      let content = body
      let canonical = true
      if (SPECIAL.test(body)) {
        // One string's text, or the event is not the template's shape (a quote ends the string early).
        try {
          content = JSON.parse(`"${body}"`) as string
        } catch {
          return undefined
        }
        canonical = !UNUSUAL_ESCAPE.test(body)
      }
      let chunk: ChatChunk
      if (t.flat) chunk = copyOf(t.chunk, content)
      else {
        chunk = cloneJson(t.chunk)
        chunk.choices[0]!.delta.content = content
      }
      if (canonical) (chunk as ChunkText)[CHUNK_TEXT] = { template: t, body, content }
      return chunk
    },
    learnable(data, json) {
      if (learnt >= MAX_LEARNT) return false
      const raw = json as { created?: unknown; choices?: unknown }
      if (typeof raw.created !== 'number' || !Array.isArray(raw.choices) || raw.choices.length !== 1)
        return false
      const delta = (raw.choices[0] as { delta?: { content?: unknown; reasoning_content?: unknown } }).delta
      // What the translation fills in or moves (a missing created, DeepSeek's reasoning) is not kept.
      if (typeof delta?.content !== 'string' || delta.reasoning_content !== undefined) return false
      // A parsed `__proto__` key is the object's own; a copy's assignment would set its prototype.
      if (data.includes('"__proto__":')) return false
      learnt++
      // The event's text is what serialising its parse gives (no spaces, no unusual escapes, numbers
      // as JavaScript writes them): then its content's string is where `learn` finds it.
      return JSON.stringify(json) === data
    },
    learn(data, chunk) {
      const literal = JSON.stringify(chunk.choices[0]!.delta.content)
      const at = contentIndex(data, literal)
      if (at < 0) return
      const kept = cloneJson(chunk)
      current = {
        before: data.slice(0, at + 1),
        after: data.slice(at + literal.length - 1),
        chunk: kept,
        flat: isFlat(kept),
      }
    },
  }
}

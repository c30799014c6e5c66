import { z } from 'zod'

// What OpenAI-compatible upstreams send back, checked loosely: fields Junction does not read are
// kept as they are (providers add their own, e.g. Groq's x_groq, DeepSeek's reasoning_content).

/** `completion_tokens` may be missing (some servers leave it out of prompt-only usage): it is then 0. */
const usage = z.looseObject({
  prompt_tokens: z.number(),
  completion_tokens: z.number().default(0),
  total_tokens: z.number(),
})

export const openAICompletionSchema = z.looseObject({
  id: z.string().optional(),
  created: z.number().optional(),
  model: z.string().optional(),
  choices: z.array(
    z.looseObject({
      index: z.number(),
      message: z.looseObject({ role: z.string().optional(), content: z.string().nullable().optional() }),
      finish_reason: z.string().nullable(),
    }),
  ),
  usage: usage.nullable().optional(),
})

export const openAIEmbeddingsSchema = z.looseObject({
  data: z.array(
    z.looseObject({
      index: z.number(),
      embedding: z.union([z.array(z.number()), z.string()]),
    }),
  ),
  usage: z.looseObject({ prompt_tokens: z.number(), total_tokens: z.number() }).optional(),
})

export const openAIErrorBodySchema = z.looseObject({
  error: z.union([
    z.looseObject({
      message: z.string().optional(),
      type: z.string().nullable().optional(),
      code: z.union([z.string(), z.number()]).nullable().optional(),
      param: z.string().nullable().optional(),
    }),
    z.string(),
  ]),
})

export type OpenAICompletion = z.infer<typeof openAICompletionSchema>
export type OpenAIUsage = z.infer<typeof usage>

/** One stream event, as `parseOpenAIChunk` lets it through; other fields are kept as they are. */
export interface OpenAIChunk {
  /** Not checked: the route replaces id and model with its own; `created` is used when a number. */
  id?: unknown
  created?: unknown
  model?: unknown
  choices: {
    index: number
    delta?: Record<string, unknown>
    finish_reason?: string | null
    [key: string]: unknown
  }[]
  usage?: OpenAIUsage | null
  [key: string]: unknown
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

/**
 * The per-chunk check of a stream, written by hand: it runs for every event of every stream, where
 * a schema library's cost shows. Null when the shape is wrong. Usage follows the rules of the
 * completion's `usage` schema: prompt_tokens and total_tokens are numbers, completion_tokens a
 * number or missing (then 0, so billing never adds up an undefined).
 */
export function parseOpenAIChunk(json: unknown): OpenAIChunk | null {
  if (!isRecord(json)) return null
  const choices = json.choices ?? []
  if (!Array.isArray(choices)) return null
  for (const c of choices) {
    if (!isRecord(c) || typeof c.index !== 'number') return null
    if (c.delta !== undefined && !isRecord(c.delta)) return null
    if (c.finish_reason !== undefined && c.finish_reason !== null && typeof c.finish_reason !== 'string')
      return null
  }
  const u = json.usage
  if (u !== undefined && u !== null) {
    if (!isRecord(u) || typeof u.prompt_tokens !== 'number' || typeof u.total_tokens !== 'number') return null
    if (u.completion_tokens === undefined) u.completion_tokens = 0
    else if (typeof u.completion_tokens !== 'number') return null
  }
  if (json.choices === undefined) json.choices = choices
  return json as OpenAIChunk
}

const completionKeys = new Set(['id', 'created', 'model', 'choices', 'usage'])
const choiceKeys = new Set(['index', 'message', 'finish_reason'])
const messageKeys = new Set(['role', 'content'])
const usageKeys = new Set(['prompt_tokens', 'completion_tokens', 'total_tokens'])

/** Appends the keys of `from` that `known` does not name, in their order, as a loose zod object does. */
function copyRest(from: Record<string, unknown>, known: Set<string>, to: Record<string, unknown>): boolean {
  for (const key of Object.keys(from)) {
    if (known.has(key)) continue
    // An own "__proto__" (JSON.parse makes one) is left to zod.
    if (key === '__proto__') return false
    to[key] = from[key]
  }
  return true
}

const optional = (o: Record<string, unknown>, key: string, type: 'string' | 'number'): boolean =>
  !Object.hasOwn(o, key) || typeof o[key] === type

/**
 * `openAICompletionSchema.parse` written by hand for the answers that pass it, the same object to the
 * key (zod's order: the schema's keys, then the others as they came; completion_tokens 0 when
 * missing): every blocking answer is checked here, where zod's walk cost ≈5 µs. Undefined when the
 * answer is anything else: zod then checks it, and its error is the one reported.
 */
export function fastOpenAICompletion(json: unknown): OpenAICompletion | undefined {
  if (!isRecord(json) || !Array.isArray(json.choices)) return undefined
  if (!optional(json, 'id', 'string') || !optional(json, 'created', 'number')) return undefined
  if (!optional(json, 'model', 'string')) return undefined
  const out: Record<string, unknown> = {}
  if (Object.hasOwn(json, 'id')) out.id = json.id
  if (Object.hasOwn(json, 'created')) out.created = json.created
  if (Object.hasOwn(json, 'model')) out.model = json.model
  const choices: Record<string, unknown>[] = []
  for (const c of json.choices as unknown[]) {
    const choice = fastChoice(c)
    if (choice === undefined) return undefined
    choices.push(choice)
  }
  out.choices = choices
  if (Object.hasOwn(json, 'usage')) {
    const usage = json.usage === null ? null : fastUsage(json.usage)
    if (usage === undefined) return undefined
    out.usage = usage
  }
  return copyRest(json, completionKeys, out) ? (out as OpenAICompletion) : undefined
}

function fastChoice(c: unknown): Record<string, unknown> | undefined {
  if (!isRecord(c) || typeof c.index !== 'number' || !isRecord(c.message)) return undefined
  const f = c.finish_reason
  if (f !== null && typeof f !== 'string') return undefined
  const m = c.message
  if (!optional(m, 'role', 'string')) return undefined
  if (Object.hasOwn(m, 'content') && m.content !== null && typeof m.content !== 'string') return undefined
  const message: Record<string, unknown> = {}
  if (Object.hasOwn(m, 'role')) message.role = m.role
  if (Object.hasOwn(m, 'content')) message.content = m.content
  if (!copyRest(m, messageKeys, message)) return undefined
  const choice: Record<string, unknown> = { index: c.index, message, finish_reason: f }
  return copyRest(c, choiceKeys, choice) ? choice : undefined
}

function fastUsage(u: unknown): Record<string, unknown> | undefined {
  if (!isRecord(u) || typeof u.prompt_tokens !== 'number' || typeof u.total_tokens !== 'number')
    return undefined
  if (!optional(u, 'completion_tokens', 'number')) return undefined
  const usage: Record<string, unknown> = {
    prompt_tokens: u.prompt_tokens,
    completion_tokens: u.completion_tokens ?? 0,
    total_tokens: u.total_tokens,
  }
  return copyRest(u, usageKeys, usage) ? usage : undefined
}

/** An error event inside a stream: `{"error": …}` without chunk fields. */
export function isOpenAIStreamError(json: unknown): boolean {
  return isRecord(json) && json.error !== undefined && json.choices === undefined
}

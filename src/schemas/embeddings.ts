import { z } from 'zod'
import { modelSlugSchema, parseRequestBody, pickedUnion } from './chat.ts'

// The embeddings request of docs/design/api-contract.md with the OpenAI names of docs/design/decisions.md. Unknown fields are
// kept: every client field is forwarded unchanged.

/** OpenAI's limit on inputs per request. */
const MAX_INPUTS = 2048
/** Far above what any embedding model outputs (a few thousand): it only stops absurd values. */
const MAX_DIMENSIONS = 65_536

/**
 * OpenAI's limit on tokens summed over all inputs of one request, applied to token-array inputs (text
 * inputs are counted by the upstream). It also bounds the per-token check below.
 */
export const MAX_INPUT_TOKENS = 300_000

/**
 * A non-empty array of token ids (non-negative safe integers), checked in one plain loop: a zod schema
 * per number took ≈0.4 µs each, 124 ms for 300 000 tokens.
 */
const tokensSchema = z.custom<number[]>().check((ctx) => {
  const tokens = ctx.value
  if (!Array.isArray(tokens) || tokens.length === 0) {
    ctx.issues.push({ code: 'custom', message: 'expected a non-empty array of token ids', input: tokens })
    return
  }
  for (let i = 0; i < tokens.length; i++) {
    const t: unknown = tokens[i]
    if (typeof t !== 'number' || !Number.isSafeInteger(t) || t < 0) {
      ctx.issues.push({
        code: 'custom',
        message: 'a token id is an integer of 0 or more',
        input: t,
        path: [i],
      })
      return
    }
  }
})

const stringsSchema = z.array(z.string().min(1)).min(1).max(MAX_INPUTS)
const tokenArraysSchema = z.array(tokensSchema).min(1).max(MAX_INPUTS)

/**
 * One text, many texts, one token array, or many token arrays (as OpenAI accepts); never empty. The
 * kind is picked from the first item, so a wrong item is reported itself (`input[3]`) and the other
 * kinds are not tried on every item.
 */
const inputSchema = pickedUnion(
  [z.string().min(1), stringsSchema, tokensSchema, tokenArraysSchema],
  (input) => {
    if (typeof input === 'string') return z.string().min(1)
    if (!Array.isArray(input)) return undefined
    const first: unknown = input[0]
    return typeof first === 'number' ? tokensSchema : Array.isArray(first) ? tokenArraysSchema : stringsSchema
  },
  'a string, an array of strings, or token ids',
).check((ctx) => {
  const input = ctx.value
  if (!Array.isArray(input)) return
  let tokens = 0
  for (const item of input) tokens += Array.isArray(item) ? item.length : typeof item === 'number' ? 1 : 0
  if (tokens > MAX_INPUT_TOKENS) {
    ctx.issues.push({
      code: 'custom',
      message: `token-array inputs hold at most ${MAX_INPUT_TOKENS} tokens in all`,
      input,
    })
  }
})

/** A union on a missing value reports `invalid_union`; this makes a missing input `missing_field`. */
const requiredInputSchema = z
  .unknown()
  .refine((input) => input !== undefined, {
    message: 'input is required',
    params: { code: 'missing_field' },
    abort: true,
  })
  .pipe(inputSchema)

export const embeddingsRequestSchema = z.looseObject({
  model: modelSlugSchema,
  input: requiredInputSchema,
  dimensions: z.number().int().min(1).max(MAX_DIMENSIONS).optional(),
  encoding_format: z.enum(['float', 'base64']).optional(),
  input_type: z.string().optional(),
  user: z.string().optional(),
})

/** A validated embeddings request; unknown fields are kept. */
export type EmbeddingsRequest = z.output<typeof embeddingsRequestSchema>

export function parseEmbeddingsRequest(body: unknown): EmbeddingsRequest {
  return parseRequestBody(embeddingsRequestSchema, body)
}

import { z } from 'zod'
import { modelSlugSchema, parseRequestBody } from './chat.ts'

// The embeddings request of interface.md with the OpenAI names of decisions.md. Unknown fields are
// kept: every client field is forwarded unchanged.

/** OpenAI's limit on inputs per request. */
const MAX_INPUTS = 2048
/** Far above what any embedding model outputs (a few thousand): it only stops absurd values. */
const MAX_DIMENSIONS = 65_536

const tokenSchema = z.number().int().min(0)
const tokensSchema = z.array(tokenSchema).min(1)

/** One text, many texts, one token array, or many token arrays (as OpenAI accepts); never empty. */
const inputSchema = z.union([
  z.string().min(1),
  z.array(z.string().min(1)).min(1).max(MAX_INPUTS),
  tokensSchema,
  z.array(tokensSchema).min(1).max(MAX_INPUTS),
])

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

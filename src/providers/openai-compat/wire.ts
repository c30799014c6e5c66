import { z } from 'zod'

// What OpenAI-compatible upstreams send back, checked loosely: fields Junction does not read are
// kept as they are (providers add their own, e.g. Groq's x_groq, DeepSeek's reasoning_content).

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

export const openAIChunkSchema = z.looseObject({
  id: z.string().optional(),
  created: z.number().optional(),
  model: z.string().optional(),
  choices: z
    .array(
      z.looseObject({
        index: z.number(),
        delta: z.looseObject({}).optional(),
        finish_reason: z.string().nullable().optional(),
      }),
    )
    .default([]),
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
export type OpenAIChunk = z.infer<typeof openAIChunkSchema>

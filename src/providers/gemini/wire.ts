import { z } from 'zod'

// The Gemini API (generativelanguage, v1beta): `models/{model}:generateContent`,
// `:streamGenerateContent?alt=sse` (each SSE event is one whole GenerateContentResponse) and
// `:batchEmbedContents`. Types for what Junction sends, zod for what comes back (loose: Google adds
// fields). https://ai.google.dev/api/generate-content

// ---------------------------------------------------------------------------------------------
// Request

export interface GeminiPart {
  text?: string
  thought?: boolean
  /** Opaque; must go back on the same part in the next turn (Gemini 3 checks it on function calls). */
  thoughtSignature?: string
  inlineData?: { mimeType: string; data: string }
  fileData?: { mimeType?: string; fileUri: string }
  functionCall?: { name: string; args?: Record<string, unknown>; id?: string }
  functionResponse?: { name: string; response: Record<string, unknown>; id?: string }
}

export interface GeminiContent {
  role: 'user' | 'model'
  parts: GeminiPart[]
}

/** The OpenAPI subset Gemini accepts for function parameters and responseSchema. */
export interface GeminiSchema {
  type?: 'STRING' | 'NUMBER' | 'INTEGER' | 'BOOLEAN' | 'ARRAY' | 'OBJECT' | 'NULL'
  format?: string
  title?: string
  description?: string
  nullable?: boolean
  enum?: string[]
  items?: GeminiSchema
  minItems?: number
  maxItems?: number
  properties?: Record<string, GeminiSchema>
  required?: string[]
  minProperties?: number
  maxProperties?: number
  propertyOrdering?: string[]
  minLength?: number
  maxLength?: number
  pattern?: string
  minimum?: number
  maximum?: number
  anyOf?: GeminiSchema[]
  default?: unknown
  example?: unknown
}

export interface GeminiFunctionDeclaration {
  name: string
  description?: string
  parameters?: GeminiSchema
}

export interface GeminiThinkingConfig {
  thinkingBudget?: number
  thinkingLevel?: 'minimal' | 'low' | 'medium' | 'high'
  includeThoughts?: boolean
}

export interface GeminiGenerationConfig {
  temperature?: number
  topP?: number
  maxOutputTokens?: number
  stopSequences?: string[]
  seed?: number
  presencePenalty?: number
  frequencyPenalty?: number
  responseMimeType?: string
  responseSchema?: GeminiSchema
  thinkingConfig?: GeminiThinkingConfig
}

export interface GeminiRequest {
  contents: GeminiContent[]
  systemInstruction?: { parts: GeminiPart[] }
  tools?: { functionDeclarations: GeminiFunctionDeclaration[] }[]
  toolConfig?: {
    functionCallingConfig: { mode: 'AUTO' | 'ANY' | 'NONE'; allowedFunctionNames?: string[] }
  }
  generationConfig?: GeminiGenerationConfig
}

/**
 * `models/{model}:countTokens`: the whole generate request (system instruction and tools count too),
 * which then must name its model. https://ai.google.dev/api/tokens
 */
export interface GeminiCountTokensRequest {
  generateContentRequest: GeminiRequest & { model: string }
}

export interface GeminiEmbedRequest {
  requests: {
    model: string
    content: { parts: { text: string }[] }
    taskType?: string
    outputDimensionality?: number
  }[]
}

// ---------------------------------------------------------------------------------------------
// Response

/** One piece of streamed function-call arguments (Vertex AI; see stream-args.ts). */
const partialArgSchema = z.looseObject({
  jsonPath: z.string(),
  stringValue: z.string().optional(),
  numberValue: z.number().optional(),
  boolValue: z.boolean().optional(),
  nullValue: z.unknown().optional(),
  willContinue: z.boolean().optional(),
})

const partSchema = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  thoughtSignature: z.string().optional(),
  functionCall: z
    .looseObject({
      // Absent on the pieces of a call whose arguments are streamed (partialArgs / willContinue).
      name: z.string().optional(),
      args: z.record(z.string(), z.unknown()).nullable().optional(),
      id: z.string().optional(),
      partialArgs: z.array(partialArgSchema).optional(),
      willContinue: z.boolean().optional(),
    })
    .optional(),
})

export const geminiUsageSchema = z.looseObject({
  promptTokenCount: z.number().int().min(0).optional(),
  candidatesTokenCount: z.number().int().min(0).optional(),
  totalTokenCount: z.number().int().min(0).optional(),
  cachedContentTokenCount: z.number().int().min(0).optional(),
  thoughtsTokenCount: z.number().int().min(0).optional(),
  toolUsePromptTokenCount: z.number().int().min(0).optional(),
})

export const geminiResponseSchema = z.looseObject({
  candidates: z
    .array(
      z.looseObject({
        content: z
          .looseObject({ role: z.string().optional(), parts: z.array(partSchema).optional() })
          .optional(),
        finishReason: z.string().optional(),
        index: z.number().optional(),
      }),
    )
    .optional(),
  promptFeedback: z.looseObject({ blockReason: z.string().optional() }).optional(),
  usageMetadata: geminiUsageSchema.optional(),
  modelVersion: z.string().optional(),
  responseId: z.string().optional(),
})

export const geminiEmbedResponseSchema = z.looseObject({
  embeddings: z.array(z.looseObject({ values: z.array(z.number()) })),
})

/** The count: `totalTokens` (cached and per-modality details are not read). */
export const geminiCountTokensResponseSchema = z.looseObject({
  totalTokens: z.number().int().nonnegative(),
})

/** `{"error": {"code": 429, "message": "…", "status": "RESOURCE_EXHAUSTED", "details": […]}}` */
export const geminiErrorBodySchema = z.looseObject({
  error: z.looseObject({
    code: z.number().optional(),
    message: z.string().optional(),
    status: z.string().optional(),
    details: z.array(z.looseObject({ '@type': z.string().optional() })).optional(),
  }),
})

export type GeminiResponse = z.infer<typeof geminiResponseSchema>
export type GeminiResponsePart = z.infer<typeof partSchema>
export type GeminiPartialArg = z.infer<typeof partialArgSchema>
export type GeminiUsage = z.infer<typeof geminiUsageSchema>
export type GeminiEmbedResponse = z.infer<typeof geminiEmbedResponseSchema>

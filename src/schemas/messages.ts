import { z } from 'zod'
import { parseRequestBody, requiredEnum, typeUnion } from './chat.ts'

// The Anthropic Messages request (`POST /v1/messages`, `/v1/messages/count_tokens`), as Anthropic
// documents it: https://docs.anthropic.com/en/api/messages. Objects are loose: fields Anthropic accepts
// and this schema does not name are kept, and reach an Anthropic upstream unchanged (dialects/anthropic).

const jsonObjectSchema = z.record(z.string(), z.unknown())

/** `{type: "ephemeral", ttl?}` on any block; checked loosely, Anthropic itself judges the rest. */
const cacheControlSchema = z.looseObject({ type: z.string().min(1), ttl: z.string().optional() }).nullable()

const cached = { cache_control: cacheControlSchema.optional() }

const textBlockSchema = z.looseObject({ type: z.literal('text'), text: z.string(), ...cached })

const imageSourceSchema = typeUnion([
  z.looseObject({ type: z.literal('base64'), media_type: z.string().min(1), data: z.string().min(1) }),
  z.looseObject({ type: z.literal('url'), url: z.string().min(1) }),
])

const imageBlockSchema = z.looseObject({ type: z.literal('image'), source: imageSourceSchema, ...cached })

const documentSourceSchema = typeUnion([
  z.looseObject({ type: z.literal('base64'), media_type: z.string().min(1), data: z.string().min(1) }),
  z.looseObject({ type: z.literal('text'), media_type: z.string().optional(), data: z.string() }),
  z.looseObject({ type: z.literal('url'), url: z.string().min(1) }),
  z.looseObject({ type: z.literal('content'), content: z.unknown() }),
])

const documentBlockSchema = z.looseObject({
  type: z.literal('document'),
  source: documentSourceSchema,
  title: z.string().nullable().optional(),
  ...cached,
})

const toolUseBlockSchema = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: jsonObjectSchema,
  ...cached,
})

const toolResultBlockSchema = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z
    .union([z.string(), z.array(typeUnion([textBlockSchema, imageBlockSchema, documentBlockSchema]))])
    .optional(),
  is_error: z.boolean().optional(),
  ...cached,
})

const thinkingBlockSchema = z.looseObject({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string(),
})

const redactedThinkingBlockSchema = z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() })

const contentBlockSchema = typeUnion([
  textBlockSchema,
  imageBlockSchema,
  documentBlockSchema,
  toolUseBlockSchema,
  toolResultBlockSchema,
  thinkingBlockSchema,
  redactedThinkingBlockSchema,
])

const messageSchema = z.looseObject({
  role: requiredEnum(['user', 'assistant']),
  content: z.union([z.string(), z.array(contentBlockSchema)]),
})

const toolSchema = z.looseObject({
  /** Absent or `custom` for a client tool; Anthropic's built-in tools have a versioned type. */
  type: z.string().optional(),
  name: z.string().min(1).max(128),
  description: z.string().optional(),
  input_schema: jsonObjectSchema.optional(),
  ...cached,
})

const toolChoiceSchema = typeUnion([
  z.looseObject({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({
    type: z.literal('tool'),
    name: z.string().min(1),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
  z.looseObject({ type: z.literal('none') }),
])

const thinkingSchema = typeUnion([
  z.looseObject({ type: z.literal('enabled'), budget_tokens: z.number().int().min(1) }),
  z.looseObject({ type: z.literal('adaptive') }),
  z.looseObject({ type: z.literal('disabled') }),
])

const baseFields = {
  /** A slug (`anthropic/claude-sonnet-4-5`) or a name the model table resolves. */
  model: z.string().min(1).max(256),
  messages: z.array(messageSchema).min(1).max(10_000),
  system: z.union([z.string(), z.array(textBlockSchema)]).optional(),
  tools: z.array(toolSchema).optional(),
  tool_choice: toolChoiceSchema.optional(),
  thinking: thinkingSchema.optional(),
}

export const messagesRequestSchema = z.looseObject({
  ...baseFields,
  // Required, as upstream: Anthropic's own words for a missing one.
  max_tokens: z
    .number({ error: (issue) => (issue.input === undefined ? 'Field required' : undefined) })
    .int()
    .positive(),
  stop_sequences: z.array(z.string()).optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().min(0).optional(),
  metadata: z.looseObject({ user_id: z.string().max(256).nullable().optional() }).optional(),
  stream: z.boolean().optional(),
})

/** count_tokens takes the request without the sampling fields (max_tokens is not required). */
export const countTokensRequestSchema = z.looseObject(baseFields)

export type MessagesRequest = z.output<typeof messagesRequestSchema>
export type CountTokensRequest = z.output<typeof countTokensRequestSchema>
export type MessagesContentBlock = z.output<typeof contentBlockSchema>
export type MessagesMessage = z.output<typeof messageSchema>
export type MessagesTool = z.output<typeof toolSchema>

export function parseMessagesRequest(body: unknown): MessagesRequest {
  return parseRequestBody(messagesRequestSchema, body)
}

export function parseCountTokensRequest(body: unknown): CountTokensRequest {
  return parseRequestBody(countTokensRequestSchema, body)
}

import { z } from 'zod'

// The Anthropic Messages API (`POST /v1/messages`, `anthropic-version: 2023-06-01`): types for what
// Junction sends, zod for what comes back. Response objects are loose: Anthropic adds fields and
// block types over time, and what Junction does not read is simply ignored.
// https://docs.anthropic.com/en/api/messages

export const ANTHROPIC_VERSION = '2023-06-01'

// ---------------------------------------------------------------------------------------------
// Request

export interface AnthropicCacheControl {
  type: 'ephemeral'
  ttl?: string
}

export interface AnthropicTextBlock {
  type: 'text'
  text: string
  cache_control?: AnthropicCacheControl
}

export type AnthropicImageSource =
  { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string }

export interface AnthropicImageBlock {
  type: 'image'
  source: AnthropicImageSource
  cache_control?: AnthropicCacheControl
}

export interface AnthropicDocumentBlock {
  type: 'document'
  source:
    | { type: 'base64'; media_type: 'application/pdf'; data: string }
    | { type: 'text'; media_type: 'text/plain'; data: string }
    | { type: 'url'; url: string }
  cache_control?: AnthropicCacheControl
}

export interface AnthropicToolUseBlock {
  type: 'tool_use'
  id: string
  name: string
  input: unknown
}

export interface AnthropicToolResultBlock {
  type: 'tool_result'
  tool_use_id: string
  content: string | (AnthropicTextBlock | AnthropicImageBlock)[]
  cache_control?: AnthropicCacheControl
}

export interface AnthropicThinkingBlock {
  type: 'thinking'
  thinking: string
  signature: string
}

export interface AnthropicRedactedThinkingBlock {
  type: 'redacted_thinking'
  data: string
}

export type AnthropicContentBlock =
  | AnthropicTextBlock
  | AnthropicImageBlock
  | AnthropicDocumentBlock
  | AnthropicToolUseBlock
  | AnthropicToolResultBlock
  | AnthropicThinkingBlock
  | AnthropicRedactedThinkingBlock

export interface AnthropicMessageParam {
  role: 'user' | 'assistant'
  content: AnthropicContentBlock[]
}

export interface AnthropicTool {
  name: string
  description?: string
  input_schema: Record<string, unknown>
  strict?: boolean
}

export type AnthropicToolChoice =
  | { type: 'auto'; disable_parallel_tool_use?: boolean }
  | { type: 'any'; disable_parallel_tool_use?: boolean }
  | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean }
  | { type: 'none' }

export type AnthropicThinkingConfig = { type: 'enabled'; budget_tokens: number } | { type: 'disabled' }

export interface AnthropicRequest {
  model: string
  max_tokens: number
  messages: AnthropicMessageParam[]
  system?: AnthropicTextBlock[]
  temperature?: number
  top_p?: number
  stop_sequences?: string[]
  tools?: AnthropicTool[]
  tool_choice?: AnthropicToolChoice
  thinking?: AnthropicThinkingConfig
  /** Structured outputs: `{format: {type: 'json_schema', schema}}`. */
  output_config?: { format: { type: 'json_schema'; schema: Record<string, unknown> } }
  metadata?: { user_id: string }
  stream?: boolean
}

// ---------------------------------------------------------------------------------------------
// Response

/** Recent models break `output_tokens` down: `thinking_tokens` is the share spent thinking. */
const outputTokensDetailsSchema = z.looseObject({
  thinking_tokens: z.number().int().min(0).nullable().optional(),
})

/**
 * One sampling iteration of a request that compacted its context (`compaction`, then `message`; other
 * types may follow). The top-level counts are the last `message` iteration's only: the compaction's
 * tokens are billed too and appear only here.
 * https://docs.anthropic.com/en/docs/build-with-claude/compaction
 */
const usageIterationSchema = z.looseObject({
  type: z.string().optional(),
  input_tokens: z.number().int().min(0).nullable().optional(),
  output_tokens: z.number().int().min(0).nullable().optional(),
  cache_creation_input_tokens: z.number().int().min(0).nullable().optional(),
  cache_read_input_tokens: z.number().int().min(0).nullable().optional(),
  output_tokens_details: outputTokensDetailsSchema.nullable().optional(),
})
export type AnthropicUsageIteration = z.infer<typeof usageIterationSchema>

export const anthropicUsageSchema = z.looseObject({
  input_tokens: z.number().int().min(0).default(0),
  output_tokens: z.number().int().min(0).default(0),
  cache_creation_input_tokens: z.number().int().min(0).nullable().optional(),
  cache_read_input_tokens: z.number().int().min(0).nullable().optional(),
  output_tokens_details: outputTokensDetailsSchema.nullable().optional(),
  iterations: z.array(usageIterationSchema).nullable().optional(),
})

/** Usage inside stream events: only what the event carries (no defaults, which would overwrite). */
const eventUsageSchema = z.looseObject({
  input_tokens: z.number().int().min(0).nullable().optional(),
  output_tokens: z.number().int().min(0).nullable().optional(),
  cache_creation_input_tokens: z.number().int().min(0).nullable().optional(),
  cache_read_input_tokens: z.number().int().min(0).nullable().optional(),
  output_tokens_details: outputTokensDetailsSchema.nullable().optional(),
  iterations: z.array(usageIterationSchema).nullable().optional(),
})

/** Why the model refused (with `stop_reason: "refusal"`); both fields may be null. */
export const stopDetailsSchema = z.looseObject({
  type: z.string().optional(),
  category: z.string().nullable().optional(),
  explanation: z.string().nullable().optional(),
})
export type AnthropicStopDetails = z.infer<typeof stopDetailsSchema>

const textBlock = z.looseObject({ type: z.literal('text'), text: z.string() })
const toolUseBlock = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string(),
  name: z.string(),
  input: z.unknown(),
})
const thinkingBlock = z.looseObject({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string().optional(),
})
const redactedThinkingBlock = z.looseObject({ type: z.literal('redacted_thinking'), data: z.string() })
/** Server tools (web search results, …) and block types newer than this code. */
const otherBlock = z.looseObject({ type: z.string() })

export const anthropicResponseBlockSchema = z.union([
  textBlock,
  toolUseBlock,
  thinkingBlock,
  redactedThinkingBlock,
  otherBlock,
])

export const anthropicMessageSchema = z.looseObject({
  id: z.string(),
  type: z.literal('message'),
  role: z.literal('assistant'),
  model: z.string().optional(),
  content: z.array(anthropicResponseBlockSchema),
  stop_reason: z.string().nullable().optional(),
  stop_sequence: z.string().nullable().optional(),
  stop_details: stopDetailsSchema.nullable().optional(),
  usage: anthropicUsageSchema,
})

export type AnthropicUsage = z.infer<typeof anthropicUsageSchema>
export type AnthropicMessage = z.infer<typeof anthropicMessageSchema>
export type AnthropicResponseBlock = z.infer<typeof anthropicResponseBlockSchema>

// ---------------------------------------------------------------------------------------------
// Streaming events (https://docs.anthropic.com/en/docs/build-with-claude/streaming)

const messageStart = z.looseObject({
  type: z.literal('message_start'),
  message: z.looseObject({
    id: z.string(),
    model: z.string().optional(),
    // Normally empty and null; a message that arrives whole carries them here.
    content: z.array(anthropicResponseBlockSchema).optional(),
    stop_reason: z.string().nullable().optional(),
    stop_sequence: z.string().nullable().optional(),
    stop_details: stopDetailsSchema.nullable().optional(),
    usage: eventUsageSchema.optional(),
  }),
})

const contentBlockStart = z.looseObject({
  type: z.literal('content_block_start'),
  index: z.number().int().min(0),
  content_block: anthropicResponseBlockSchema,
})

const contentBlockDelta = z.looseObject({
  type: z.literal('content_block_delta'),
  index: z.number().int().min(0),
  delta: z.union([
    z.looseObject({ type: z.literal('text_delta'), text: z.string() }),
    z.looseObject({ type: z.literal('input_json_delta'), partial_json: z.string() }),
    z.looseObject({ type: z.literal('thinking_delta'), thinking: z.string() }),
    z.looseObject({ type: z.literal('signature_delta'), signature: z.string() }),
    // citations_delta and whatever comes next
    z.looseObject({ type: z.string() }),
  ]),
})

const contentBlockStop = z.looseObject({
  type: z.literal('content_block_stop'),
  index: z.number().int().min(0),
})

const messageDelta = z.looseObject({
  type: z.literal('message_delta'),
  delta: z.looseObject({
    stop_reason: z.string().nullable().optional(),
    stop_sequence: z.string().nullable().optional(),
    stop_details: stopDetailsSchema.nullable().optional(),
  }),
  usage: eventUsageSchema.optional(),
})

const messageStop = z.looseObject({ type: z.literal('message_stop') })
const ping = z.looseObject({ type: z.literal('ping') })

export const anthropicErrorBodySchema = z.looseObject({
  type: z.literal('error').optional(),
  error: z.looseObject({ type: z.string().optional(), message: z.string().optional() }),
})

const errorEvent = anthropicErrorBodySchema.extend({ type: z.literal('error') })

const eventSchemas = {
  message_start: messageStart,
  content_block_start: contentBlockStart,
  content_block_delta: contentBlockDelta,
  content_block_stop: contentBlockStop,
  message_delta: messageDelta,
  message_stop: messageStop,
  ping,
  error: errorEvent,
} as const

export type AnthropicEvent = {
  [K in keyof typeof eventSchemas]: z.infer<(typeof eventSchemas)[K]>
}[keyof typeof eventSchemas]

export type AnthropicEventType = AnthropicEvent['type']

/**
 * Parses one stream event. `undefined` for an event type this code does not know: Anthropic's
 * versioning policy says new event types may be added and are to be ignored.
 */
export function parseAnthropicEvent(
  json: unknown,
): { ok: true; event: AnthropicEvent | undefined } | { ok: false; error: z.ZodError | undefined } {
  if (typeof json !== 'object' || json === null) return { ok: false, error: undefined }
  const type = (json as { type?: unknown }).type
  if (typeof type !== 'string') return { ok: false, error: undefined }
  if (!(type in eventSchemas)) return { ok: true, event: undefined }
  const parsed = eventSchemas[type as AnthropicEventType].safeParse(json)
  return parsed.success
    ? { ok: true, event: parsed.data as AnthropicEvent }
    : { ok: false, error: parsed.error }
}

// ---------------------------------------------------------------------------------------------
// A Messages request that came in on Junction's own /v1/messages

/**
 * The client's Anthropic body and `anthropic-beta` values, attached to the internal chat request under
 * this symbol by the Messages dialect. A symbol key survives object spreads and never reaches a JSON
 * body, so other upstreams never see it; the Anthropic adapter sends this body instead of translating
 * the chat request, so nothing the client sent (cache_control anywhere, signatures, beta fields) is lost.
 */
export const ANTHROPIC_NATIVE = Symbol('junction.anthropic-native')

export interface AnthropicNative {
  body: Record<string, unknown>
  /** `anthropic-beta` header values, forwarded as they came. */
  beta: string[]
}

export function nativeAnthropicOf(req: object): AnthropicNative | undefined {
  return (req as { [ANTHROPIC_NATIVE]?: AnthropicNative })[ANTHROPIC_NATIVE]
}

/**
 * The Anthropic message an upstream answered to a native request, kept on the chat completion under
 * this symbol (never serialised) so /v1/messages can answer it as it came: server tool blocks,
 * citations, `pause_turn` and the usage's own fields survive, which the chat shape has no room for.
 */
export const ANTHROPIC_NATIVE_ANSWER = Symbol('junction.anthropic-native-answer')

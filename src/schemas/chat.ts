import { z } from 'zod'
import { fromZodError, invalidRequest } from '../errors.ts'
import type { ReasoningDetail } from '../domain/chat.ts'

// The chat completion request of docs/design/api-contract.md ("Chat completion request" and "Message" tables) and
// docs/design/decisions.md. Objects are loose: unknown fields are kept because they are forwarded to upstreams.
// Only the first zod issue reaches the client (errors.ts), so its path must name the real culprit.
// The request types (ChatRequest, ChatMessage, ContentPart, Tool, …) are the schemas' output types,
// exported at the end of this file; providers/types.ts re-exports them.

// ---------------------------------------------------------------------------------------------
// Shared helpers (embeddings.ts uses them too)

/**
 * A slug `provider/model_name` (the model name may itself contain slashes) or a bare alias a model
 * declares (`gpt-5`); an unknown name is the router's 404 `model_not_found`.
 */
export const modelSlugSchema = z
  .string()
  .max(256)
  .regex(/^[^/\s]+(\/\S+)?$/, 'model must be a slug provider/model_name or a model alias')

/**
 * Parses a request body: a JSON object, then the schema. `reportInput` keeps each issue's input,
 * which errors.ts needs to tell a missing field (`missing_field`) from a wrong one (`invalid_value`).
 */
export function parseRequestBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  if (!isPlainObject(body)) throw invalidRequest('invalid_value', 'request body must be a JSON object')
  const result = schema.safeParse(body, { reportInput: true })
  if (!result.success) throw fromZodError(result.error)
  return result.data
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

type Options = readonly z.ZodType[]

/**
 * A union whose branch is chosen from the input up front (by JS type or by a `type` tag). A failing
 * z.union is reported at its own path only (`messages[0].content`); the picked branch's issues keep
 * their full path (`messages[0].content[1].image_url.url`). `options` give the output type; `pick`
 * returns one of them, or a narrower schema that is sure to fail (to report the right issue), or
 * undefined for an input of no expected shape. The branches must not transform: the input is kept.
 */
export function pickedUnion<const S extends Options>(
  options: S,
  pick: (input: unknown) => z.ZodType | undefined,
  expected: string,
) {
  return z.custom<z.output<S[number]>>().check((ctx) => {
    if (ctx.value === undefined) {
      ctx.issues.push({ code: 'invalid_type', expected: 'nonoptional', input: undefined })
      return
    }
    const schema = pick(ctx.value)
    if (schema === undefined) {
      ctx.issues.push({ code: 'custom', message: `expected ${expected}`, input: ctx.value })
      return
    }
    const result = schema.safeParse(ctx.value, { reportInput: true })
    // A finalized issue is a raw issue with its message already set; its path is prefixed on the way up.
    if (!result.success)
      for (const issue of result.error.issues) ctx.issues.push(issue as z.core.$ZodRawIssue)
  })
}

const jsonObjectSchema = z.record(z.string(), z.unknown())

/** zod reports a missing enum value as `invalid_value`; checking for a string first makes it `missing_field`. */
export function requiredEnum<const T extends readonly [string, ...string[]]>(values: T) {
  return z.string().pipe(z.enum(values))
}

type Discriminable = readonly [z.core.$ZodTypeDiscriminable, ...z.core.$ZodTypeDiscriminable[]]

/** A union discriminated by `type`; as with requiredEnum, a missing `type` is `missing_field`. */
export function typeUnion<const T extends Discriminable>(options: T) {
  const union = z.discriminatedUnion('type', options)
  const tagged = z.looseObject({ type: z.string() })
  return pickedUnion(
    [union],
    (input) => (isPlainObject(input) && input.type !== undefined ? union : tagged),
    'an object',
  )
}

// ---------------------------------------------------------------------------------------------
// Messages

const textPartSchema = z.looseObject({ type: z.literal('text'), text: z.string() })

const imagePartSchema = z.looseObject({
  type: z.literal('image_url'),
  // `url` may also be a `file-…` id of the caller's own file (docs/design/decisions.md).
  image_url: z.looseObject({ url: z.string().min(1), detail: z.string().optional() }),
})

const filePartSchema = z.looseObject({
  type: z.literal('file'),
  file: z
    .looseObject({
      file_id: z.string().min(1).optional(),
      file_data: z.string().min(1).optional(),
      filename: z.string().optional(),
    })
    .check((ctx) => {
      if (ctx.value.file_id === undefined && ctx.value.file_data === undefined) {
        ctx.issues.push({
          code: 'custom',
          message: 'file needs file_id or file_data',
          input: ctx.value,
          params: { code: 'missing_field' },
        })
      }
    }),
})

const audioPartSchema = z.looseObject({
  type: z.literal('input_audio'),
  input_audio: z.looseObject({ data: z.string().min(1), format: z.string().min(1) }),
})

/** An assistant's refusal, as OpenAI sends assistant content back in multi-turn use. */
const refusalPartSchema = z.looseObject({ type: z.literal('refusal'), refusal: z.string() })

/** A kind the gateway does not know: kept as it is (OpenAI-compatible upstreams get it unchanged). */
const otherPartSchema = z.looseObject({ type: z.string() })

const knownPartSchemas = new Map<unknown, z.ZodType>([
  ['text', textPartSchema],
  ['image_url', imagePartSchema],
  ['file', filePartSchema],
  ['input_audio', audioPartSchema],
  ['refusal', refusalPartSchema],
])

/** Known kinds are checked against their shape; any other kind passes as a loose object. */
const contentPartSchema = pickedUnion(
  [textPartSchema, imagePartSchema, filePartSchema, audioPartSchema, refusalPartSchema, otherPartSchema],
  (input) => (isPlainObject(input) && knownPartSchemas.get(input.type)) || otherPartSchema,
  'a content part object',
)

const contentPartsSchema = z.array(contentPartSchema).min(1)

const contentStringSchema = z.string()

// The pick functions run per request: they return schemas built once, never new ones.
const contentSchema = pickedUnion(
  [contentStringSchema, contentPartsSchema],
  (input) =>
    typeof input === 'string' ? contentStringSchema : Array.isArray(input) ? contentPartsSchema : undefined,
  'a string or an array of content parts',
)

const toolCallSchema = z.looseObject({
  id: z.string().min(1),
  type: requiredEnum(['function']),
  function: z.looseObject({ name: z.string().min(1), arguments: z.string() }),
})

const reasoningDetailSchema = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  signature: z.string().optional(),
  format: z.string().optional(),
  index: z.number().optional(),
}) satisfies z.ZodType<ReasoningDetail>

const roles = ['developer', 'system', 'user', 'assistant', 'tool'] as const

/** developer, system and user messages must carry content. */
const instructionMessageSchema = z.looseObject({
  role: z.literal(['developer', 'system', 'user']),
  content: contentSchema,
  name: z.string().optional(),
})

const assistantMessageSchema = z
  .looseObject({
    role: z.literal('assistant'),
    content: contentSchema.nullable().optional(),
    name: z.string().optional(),
    tool_calls: z.array(toolCallSchema).optional(),
    refusal: z.string().nullable().optional(),
    reasoning: z.string().optional(),
    reasoning_details: z.array(reasoningDetailSchema).optional(),
  })
  .check((ctx) => {
    const m = ctx.value
    // `function_call` is the legacy form of tool_calls; OpenAI still accepts it.
    const hasCalls = (m.tool_calls?.length ?? 0) > 0 || m.function_call !== undefined
    if ((m.content === undefined || m.content === null) && !hasCalls) {
      ctx.issues.push({
        code: 'custom',
        message: 'an assistant message needs content or tool_calls',
        input: m.content,
        path: ['content'],
        params: { code: 'missing_field' },
      })
    }
  })

const toolMessageSchema = z.looseObject({
  role: z.literal('tool'),
  content: contentSchema,
  tool_call_id: z.string().min(1),
  name: z.string().optional(),
})

/**
 * The role is checked on its own first: a missing role is `missing_field` and a bad one
 * `invalid_value`, both at `messages[i].role`; then the message is checked against its role's shape.
 */
const messageSchema = z
  .looseObject({ role: requiredEnum(roles) })
  .pipe(z.discriminatedUnion('role', [instructionMessageSchema, assistantMessageSchema, toolMessageSchema]))

// ---------------------------------------------------------------------------------------------
// Tools

const toolNameSchema = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,64}$/, 'tool names are 1-64 characters of a-z, A-Z, 0-9, _ and -')

const functionToolSchema = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({
    name: toolNameSchema,
    description: z.string().optional(),
    parameters: jsonObjectSchema.optional(),
    strict: z.boolean().optional(),
  }),
})

const customToolSchema = z.looseObject({
  type: z.literal('custom'),
  custom: z.looseObject({ name: z.string().min(1), description: z.string().optional() }),
})

const toolSchema = typeUnion([functionToolSchema, customToolSchema])

const toolChoiceModeSchema = z.enum(['none', 'auto', 'required'])

const namedToolChoiceSchema = typeUnion([
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string().min(1) }) }),
  z.looseObject({ type: z.literal('custom'), custom: z.looseObject({ name: z.string().min(1) }) }),
  z.looseObject({
    type: z.literal('allowed_tools'),
    allowed_tools: z.looseObject({
      mode: requiredEnum(['auto', 'required']),
      tools: z.array(jsonObjectSchema),
    }),
  }),
])

const toolChoiceSchema = pickedUnion(
  [toolChoiceModeSchema, namedToolChoiceSchema],
  (input) =>
    typeof input === 'string'
      ? toolChoiceModeSchema
      : isPlainObject(input)
        ? namedToolChoiceSchema
        : undefined,
  'a string or a tool choice object',
)

// ---------------------------------------------------------------------------------------------
// Other request fields

export const metadataSchema = z.record(z.string(), z.string().max(512)).check((ctx) => {
  const keys = Object.keys(ctx.value)
  if (keys.length > 16) {
    ctx.issues.push({ code: 'custom', message: 'metadata holds at most 16 pairs', input: ctx.value })
  }
  // Reported at `metadata` (not `metadata.<key>`): the key itself is what is wrong.
  if (keys.some((key) => key.length > 64)) {
    ctx.issues.push({ code: 'custom', message: 'metadata keys are at most 64 characters', input: ctx.value })
  }
})

const responseFormatSchema = typeUnion([
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    json_schema: z.looseObject({
      name: z.string().min(1).max(64),
      description: z.string().optional(),
      schema: jsonObjectSchema.optional(),
      strict: z.boolean().nullable().optional(),
    }),
  }),
])

function isIanaTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: name })
    return true
  } catch {
    return false
  }
}

const webSearchOptionsSchema = z.looseObject({
  search_context_size: z.enum(['low', 'medium', 'high']).optional(),
  user_location: z
    .looseObject({
      type: requiredEnum(['approximate']),
      approximate: z.looseObject({
        city: z.string().optional(),
        country: z
          .string()
          .regex(/^[A-Za-z]{2}$/, 'country is a two-letter ISO code')
          .optional(),
        region: z.string().optional(),
        timezone: z.string().refine(isIanaTimeZone, 'timezone is an IANA time zone name').optional(),
      }),
    })
    .nullable()
    .optional(),
})

const streamOptionsSchema = z.looseObject({
  include_usage: z.boolean().optional(),
  include_obfuscation: z.boolean().optional(),
})

const reasoningSchema = z.looseObject({
  enabled: z.boolean(),
  effort: z.enum(['low', 'medium', 'high']).optional(),
  max_tokens: z.number().int().min(0).optional(),
  exclude: z.boolean().optional(),
  usage: z.looseObject({ include: z.boolean() }).optional(),
})

const providerSchema = z.looseObject({
  routing: z.looseObject({
    type: requiredEnum(['priority', 'round_robin', 'least_latency']),
    primary_factor: z.enum(['cost', 'speed', 'quality']).optional(),
    providers: z.array(z.string().min(1)),
  }),
  fallback: z.string().optional(),
})

const modelRoutingConfigSchema = z.looseObject({
  available_models: z.array(z.string().min(1)),
  preference: z.string().optional(),
  task_info: z
    .looseObject({
      task_type: z.enum(['chat', 'completion', 'embedding']).optional(),
      complexity: z.enum(['low', 'medium', 'high']).optional(),
    })
    .optional(),
})

const maxTokensSchema = z.number().int().positive().nullable().optional()

const penaltySchema = z.number().min(-2).max(2).optional()

/** 1..128 is the OpenAI schema; only 1 is served (docs/design/decisions.md), so 2..128 is unsupported, not invalid. */
const nSchema = z
  .number()
  .int()
  .min(1)
  .max(128)
  .refine((n) => n === 1, { message: 'only n=1 is supported', params: { code: 'unsupported_parameter' } })

// ---------------------------------------------------------------------------------------------
// The request

export const chatRequestSchema = z
  .looseObject({
    model: modelSlugSchema,
    messages: z.array(messageSchema).min(1),
    max_completion_tokens: maxTokensSchema,
    /** Legacy alias of max_completion_tokens. */
    max_tokens: maxTokensSchema,
    temperature: z.number().min(0).max(2).optional(),
    top_p: z.number().min(0).max(1).optional(),
    n: nSchema.optional(),
    frequency_penalty: penaltySchema,
    presence_penalty: penaltySchema,
    stop: z.union([z.string(), z.array(z.string()).max(4), z.null()]).optional(),
    logit_bias: z
      .record(z.string().regex(/^\d+$/, 'keys are token ids'), z.number().min(-100).max(100))
      .optional(),
    logprobs: z.boolean().nullable().optional(),
    top_logprobs: z.number().int().min(0).max(20).optional(),
    /** An integer in the safe range (zod's int): `1e309` parses to Infinity and is refused, not forwarded as null. */
    seed: z.number().int().nullable().optional(),
    tools: z.array(toolSchema).optional(),
    tool_choice: toolChoiceSchema.optional(),
    parallel_tool_calls: z.boolean().optional(),
    reasoning_effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).optional(),
    verbosity: z.enum(['low', 'medium', 'high']).optional(),
    web_search_options: webSearchOptionsSchema.optional(),
    metadata: metadataSchema.optional(),
    response_format: responseFormatSchema.optional(),
    stream: z.boolean().nullable().optional(),
    stream_options: streamOptionsSchema.nullable().optional(),
    reasoning: reasoningSchema.optional(),
    provider: providerSchema.optional(),
    model_routing_config: modelRoutingConfigSchema.optional(),
  })
  .check((ctx) => {
    const req = ctx.value
    if (req.top_logprobs !== undefined && req.logprobs !== true) {
      ctx.issues.push({
        code: 'custom',
        message: 'top_logprobs requires logprobs: true',
        input: req.top_logprobs,
        path: ['top_logprobs'],
      })
    }
    if (req.stream_options !== undefined && req.stream_options !== null && req.stream !== true) {
      ctx.issues.push({
        code: 'custom',
        message: 'stream_options requires stream: true',
        input: req.stream_options,
        path: ['stream_options'],
      })
    }
  })

/**
 * How many of each repeated thing one chat request may hold (docs/clients/chat.md, request caps). Far above real use
 * (OpenAI documents 128 tools and 16 metadata pairs), they bound the work one request costs: zod
 * checks an array's length only after every item, so these are checked first, by length alone.
 * Objects of more than 10 000 keys anywhere were refused when the body was parsed (http/json-body.ts).
 */
export const CHAT_LIMITS = {
  messages: 10_000,
  /** Content parts of all messages together. */
  contentParts: 10_000,
  /** Tool calls of all assistant messages together. */
  toolCalls: 10_000,
  /** reasoning_details items of all messages together. */
  reasoningDetails: 10_000,
  tools: 1_024,
  /** Tools listed by an allowed_tools tool choice. */
  allowedTools: 1_024,
  logitBias: 1_024,
  stop: 4,
  /** provider.routing.providers and model_routing_config.available_models. */
  routingModels: 256,
} as const

/** 400 `invalid_value` naming the first field past its CHAT_LIMITS entry; looks at lengths only. */
export function checkChatSizes(body: Record<string, unknown>): void {
  const L = CHAT_LIMITS
  const over = (value: unknown, max: number): boolean => Array.isArray(value) && value.length > max
  const refuse = (param: string, message: string): never => {
    throw invalidRequest('invalid_value', message, param)
  }
  const { messages, tools, logit_bias, tool_choice, stop, provider, model_routing_config } = body
  if (over(messages, L.messages)) refuse('messages', `messages holds at most ${L.messages} items`)
  if (Array.isArray(messages)) {
    const totals = { content: 0, tool_calls: 0, reasoning_details: 0 }
    const caps = { content: L.contentParts, tool_calls: L.toolCalls, reasoning_details: L.reasoningDetails }
    const what = {
      content: 'content parts',
      tool_calls: 'tool calls',
      reasoning_details: 'reasoning_details items',
    }
    for (let i = 0; i < messages.length; i++) {
      const m: unknown = messages[i]
      if (!isPlainObject(m)) continue
      for (const field of ['content', 'tool_calls', 'reasoning_details'] as const) {
        const items = m[field]
        if (!Array.isArray(items)) continue
        totals[field] += items.length
        if (totals[field] > caps[field]) {
          refuse(`messages[${i}].${field}`, `the messages hold at most ${caps[field]} ${what[field]} in all`)
        }
      }
    }
  }
  if (over(tools, L.tools)) refuse('tools', `tools holds at most ${L.tools} tools`)
  if (isPlainObject(tool_choice) && isPlainObject(tool_choice.allowed_tools)) {
    if (over(tool_choice.allowed_tools.tools, L.allowedTools)) {
      refuse('tool_choice.allowed_tools.tools', `allowed_tools holds at most ${L.allowedTools} tools`)
    }
  }
  if (isPlainObject(logit_bias) && Object.keys(logit_bias).length > L.logitBias) {
    refuse('logit_bias', `logit_bias holds at most ${L.logitBias} token ids`)
  }
  if (over(stop, L.stop)) refuse('stop', `stop holds at most ${L.stop} strings`)
  if (isPlainObject(provider) && isPlainObject(provider.routing)) {
    if (over(provider.routing.providers, L.routingModels)) {
      refuse('provider.routing.providers', `providers holds at most ${L.routingModels} items`)
    }
  }
  if (isPlainObject(model_routing_config) && over(model_routing_config.available_models, L.routingModels)) {
    refuse('model_routing_config.available_models', `available_models holds at most ${L.routingModels} items`)
  }
}

export function parseChatRequest(body: unknown): ChatRequest {
  if (isPlainObject(body)) {
    checkChatSizes(body)
    const fast = fastChatRequest(body)
    if (fast !== undefined) return fast
  }
  return parseRequestBody(chatRequestSchema, body)
}

// ---------------------------------------------------------------------------------------------
// The fast path: the common request checked by hand (a zod parse of it cost several µs per request).
// zod stays the source of truth: the fast path answers only for requests it is sure zod accepts, with
// the value zod would give (the same keys in the same order: the schemas' own, then the others as
// they came), and leaves everything else to zod, which then also words every error. A field, role or
// content part it does not check sends the request to zod. test/unit/schemas/chat-fast.test.ts
// compares both on many requests.

/** The request's fields, in the order zod outputs them. */
const REQUEST_KEYS = Object.keys(chatRequestSchema.shape)
const REQUEST_KNOWN = new Set(REQUEST_KEYS)
/** The fields a request must have (model, messages): those whose schema refuses undefined. */
const REQUEST_REQUIRED = new Set(
  REQUEST_KEYS.filter(
    (key) =>
      !chatRequestSchema.shape[key as keyof typeof chatRequestSchema.shape].safeParse(undefined).success,
  ),
)
const INSTRUCTION_KEYS = Object.keys(instructionMessageSchema.shape)
const ASSISTANT_KEYS = Object.keys(assistantMessageSchema.shape)
const INSTRUCTION_KNOWN = new Set(INSTRUCTION_KEYS)
const ASSISTANT_KNOWN = new Set(ASSISTANT_KEYS)
const STREAM_OPTION_KEYS = Object.keys(streamOptionsSchema.shape)
const MODEL_SLUG = /^[^/\s]+(\/\S+)?$/

const isNumberIn = (v: unknown, min: number, max: number): boolean =>
  typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max
const optional =
  (check: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === undefined || check(v)

/** The checks of the fields the fast path knows; a known field without one sends the request to zod. */
const FAST_FIELDS: Record<string, (v: unknown) => boolean> = {
  model: (v) => typeof v === 'string' && v.length <= 256 && MODEL_SLUG.test(v),
  // Checked (and copied) by fastMessages.
  messages: () => true,
  max_completion_tokens: optional((v) => v === null || (Number.isSafeInteger(v) && (v as number) > 0)),
  max_tokens: optional((v) => v === null || (Number.isSafeInteger(v) && (v as number) > 0)),
  temperature: optional((v) => isNumberIn(v, 0, 2)),
  top_p: optional((v) => isNumberIn(v, 0, 1)),
  n: optional((v) => v === 1),
  frequency_penalty: optional((v) => isNumberIn(v, -2, 2)),
  presence_penalty: optional((v) => isNumberIn(v, -2, 2)),
  seed: optional((v) => v === null || Number.isSafeInteger(v)),
  parallel_tool_calls: optional((v) => typeof v === 'boolean'),
  stream: optional((v) => v === null || typeof v === 'boolean'),
  // Checked (and copied) below.
  stream_options: () => true,
}

/** Content zod keeps as it came (pickedUnion): a string, or text parts. */
function isFastContent(content: unknown): boolean {
  if (typeof content === 'string') return true
  if (!Array.isArray(content) || content.length === 0) return false
  for (const part of content) {
    if (!isPlainObject(part) || part.type !== 'text' || typeof part.text !== 'string') return false
  }
  return true
}

/** A message as zod outputs it, or undefined when the fast path does not check its shape. */
function fastMessage(m: unknown): Record<string, unknown> | undefined {
  if (!isPlainObject(m) || Object.hasOwn(m, '__proto__')) return undefined
  const role = m.role
  const instruction = role === 'user' || role === 'system' || role === 'developer'
  if (!instruction && role !== 'assistant') return undefined
  // An assistant message takes the same path only with content (its tool calls go to zod).
  if (!isFastContent(m.content)) return undefined
  if (m.name !== undefined && typeof m.name !== 'string') return undefined
  const keys = instruction ? INSTRUCTION_KEYS : ASSISTANT_KEYS
  const known = instruction ? INSTRUCTION_KNOWN : ASSISTANT_KNOWN
  const out: Record<string, unknown> = {}
  for (const key of keys) {
    const v = m[key]
    if (v === undefined) continue
    if (key !== 'role' && key !== 'content' && key !== 'name') return undefined
    out[key] = v
  }
  for (const key in m) if (!known.has(key)) out[key] = m[key]
  return out
}

/**
 * The request as zod outputs it, when every field is one the fast path checks and passes; otherwise
 * undefined (zod then decides, and words the error).
 */
export function fastChatRequest(body: Record<string, unknown>): ChatRequest | undefined {
  if (Object.hasOwn(body, '__proto__')) return undefined
  const messages = body.messages
  if (!Array.isArray(messages) || messages.length === 0) return undefined
  const out: Record<string, unknown> = {}
  for (const key of REQUEST_KEYS) {
    const v = body[key]
    if (v === undefined) {
      if (REQUEST_REQUIRED.has(key)) return undefined
      continue
    }
    const check = FAST_FIELDS[key]
    if (check === undefined || !check(v)) return undefined
    out[key] = v
  }
  const copied: Record<string, unknown>[] = new Array(messages.length)
  for (let i = 0; i < messages.length; i++) {
    const m = fastMessage(messages[i])
    if (m === undefined) return undefined
    copied[i] = m
  }
  out.messages = copied
  const so = body.stream_options
  if (so !== undefined && so !== null) {
    // Allowed with stream: true only; zod words the error otherwise.
    if (body.stream !== true || !isPlainObject(so)) return undefined
    const options: Record<string, unknown> = {}
    for (const key in so) if (!STREAM_OPTION_KEYS.includes(key)) return undefined
    for (const key of STREAM_OPTION_KEYS) {
      const v = so[key]
      if (v === undefined) continue
      if (typeof v !== 'boolean') return undefined
      options[key] = v
    }
    out.stream_options = options
  }
  for (const key in body) if (!REQUEST_KNOWN.has(key)) out[key] = body[key]
  return out as ChatRequest
}

// ---------------------------------------------------------------------------------------------
// The types of a validated request: what the schemas above output, so the two cannot drift apart.

export type TextPart = z.output<typeof textPartSchema>
export type ImagePart = z.output<typeof imagePartSchema>
export type FilePart = z.output<typeof filePartSchema>
export type AudioPart = z.output<typeof audioPartSchema>
export type RefusalPart = z.output<typeof refusalPartSchema>
/** The content part kinds the schema checks: a closed union, narrowed by `type`. */
export type KnownContentPart = TextPart | ImagePart | FilePart | AudioPart | RefusalPart
/** A part of any other kind, accepted unchecked (see isKnownContentPart). */
export type OtherContentPart = z.output<typeof otherPartSchema>
export type ContentPart = KnownContentPart | OtherContentPart

/**
 * Tells the checked kinds from the others. `type` alone cannot: an other part's `type` is any string,
 * so a `switch (part.type)` on a ContentPart never rules it out. A part that passed the schema with a
 * known `type` was checked against that kind's shape, so the tag is enough here.
 */
export function isKnownContentPart(part: ContentPart): part is KnownContentPart {
  return knownPartSchemas.has(part.type)
}

export type InstructionMessage = z.output<typeof instructionMessageSchema>
export type AssistantMessage = z.output<typeof assistantMessageSchema>
export type ToolMessage = z.output<typeof toolMessageSchema>
/** A message, discriminated by `role`. */
export type ChatMessage = z.output<typeof messageSchema>
export type Role = ChatMessage['role']
/** A tool call of an assistant message sent back by the client. */
export type ToolCallParam = z.output<typeof toolCallSchema>

export type FunctionTool = z.output<typeof functionToolSchema>
export type CustomTool = z.output<typeof customToolSchema>
export type Tool = z.output<typeof toolSchema>
export type ToolChoice = z.output<typeof toolChoiceSchema>
export type ReasoningOptions = z.output<typeof reasoningSchema>

/** A validated chat request. Unknown top-level fields are kept (forwarded to OpenAI-compatible upstreams). */
export type ChatRequest = z.output<typeof chatRequestSchema>

import { z } from 'zod'
import {
  isPlainObject,
  metadataSchema,
  modelSlugSchema,
  parseRequestBody,
  pickedUnion,
  requiredEnum,
  typeUnion,
} from './chat.ts'

// The OpenAI Responses API request (POST /v1/responses), https://platform.openai.com/docs/api-reference/responses/create.
// Unlike chat completions nothing is forwarded as it is: the request is translated into a chat request
// (dialects/responses/request.ts), so the top level is strict: a field we do not know is a 400 naming it,
// as OpenAI answers one, never silently dropped. Fields accepted but without effect are listed in
// IGNORED_FIELDS (and in docs/clients/responses.md).

/** Accepted for SDK compatibility, without effect (documented in docs/clients/responses.md). */
export const IGNORED_FIELDS = [
  'include',
  'truncation',
  'service_tier',
  'prompt_cache_key',
  'prompt_cache_retention',
  'safety_identifier',
  'stream_options',
] as const

/** Tool types that only exist inside OpenAI (run by OpenAI, not by the client): refused by name. */
function unsupported(message: string, path: PropertyKey[] = []) {
  return z.unknown().check((ctx) => {
    ctx.issues.push({
      code: 'custom',
      message,
      input: ctx.value,
      path,
      params: { code: 'unsupported_parameter' },
    })
  })
}

// ---------------------------------------------------------------------------------------------
// Content parts

const inputTextSchema = z.looseObject({ type: z.literal('input_text'), text: z.string() })

const inputImageSchema = z
  .looseObject({
    type: z.literal('input_image'),
    image_url: z.string().min(1).nullable().optional(),
    file_id: z.string().min(1).nullable().optional(),
    detail: z.enum(['low', 'high', 'auto']).optional(),
  })
  .check((ctx) => {
    if (!ctx.value.image_url && !ctx.value.file_id) {
      ctx.issues.push({
        code: 'custom',
        message: 'input_image needs image_url or file_id',
        input: ctx.value,
        params: { code: 'missing_field' },
      })
    }
  })

const inputFileSchema = z
  .looseObject({
    type: z.literal('input_file'),
    file_id: z.string().min(1).nullable().optional(),
    file_data: z.string().min(1).optional(),
    filename: z.string().optional(),
    file_url: z.string().optional(),
  })
  .check((ctx) => {
    if (ctx.value.file_url !== undefined) {
      ctx.issues.push({
        code: 'custom',
        message: 'file_url is not supported: send file_id (an uploaded file) or file_data',
        input: ctx.value.file_url,
        path: ['file_url'],
        params: { code: 'unsupported_parameter' },
      })
    } else if (!ctx.value.file_id && ctx.value.file_data === undefined) {
      ctx.issues.push({
        code: 'custom',
        message: 'input_file needs file_id or file_data',
        input: ctx.value,
        params: { code: 'missing_field' },
      })
    }
  })

const outputTextSchema = z.looseObject({ type: z.literal('output_text'), text: z.string() })
const refusalSchema = z.looseObject({ type: z.literal('refusal'), refusal: z.string() })

const inputPartSchemas = new Map<unknown, z.ZodType>([
  ['input_text', inputTextSchema],
  ['input_image', inputImageSchema],
  ['input_file', inputFileSchema],
])
const assistantPartSchemas = new Map<unknown, z.ZodType>([
  ['output_text', outputTextSchema],
  ['refusal', refusalSchema],
])

function partSchema(known: Map<unknown, z.ZodType>, options: readonly z.ZodType[], who: string) {
  const names = [...known.keys()].join(', ')
  const missing = z.looseObject({ type: z.string() })
  return pickedUnion(
    options,
    (input) => {
      if (!isPlainObject(input)) return undefined
      if (input.type === undefined) return missing
      return (
        known.get(input.type) ??
        unsupported(`content part type ${String(input.type)} is not supported in ${who} content (${names})`, [
          'type',
        ])
      )
    },
    'a content part object',
  )
}

const inputPartSchema = partSchema(
  inputPartSchemas,
  [inputTextSchema, inputImageSchema, inputFileSchema],
  'input',
)
const assistantPartSchema = partSchema(assistantPartSchemas, [outputTextSchema, refusalSchema], 'assistant')

function contentSchema<P extends z.ZodType>(part: P) {
  const parts = z.array(part).max(10_000)
  const text = z.string()
  return pickedUnion(
    [text, parts],
    (input) => (typeof input === 'string' ? text : Array.isArray(input) ? parts : undefined),
    'a string or an array of content parts',
  )
}

// ---------------------------------------------------------------------------------------------
// Input items

const inputMessageSchema = z.looseObject({
  type: z.literal('message').optional(),
  role: z.literal(['user', 'system', 'developer']),
  content: contentSchema(inputPartSchema),
})

const assistantMessageSchema = z.looseObject({
  type: z.literal('message').optional(),
  role: z.literal('assistant'),
  content: contentSchema(assistantPartSchema),
})

const messageItemSchema = z
  .looseObject({ role: requiredEnum(['user', 'system', 'developer', 'assistant']) })
  .pipe(z.discriminatedUnion('role', [inputMessageSchema, assistantMessageSchema]))

const functionCallItemSchema = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1),
  name: z.string().min(1),
  arguments: z.string(),
})

const functionCallOutputItemSchema = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1),
  output: contentSchema(inputPartSchema),
})

const reasoningItemSchema = z.looseObject({
  type: z.literal('reasoning'),
  summary: z.array(z.looseObject({ type: z.literal('summary_text'), text: z.string() })),
  content: z.array(z.looseObject({ type: z.literal('reasoning_text'), text: z.string() })).optional(),
  encrypted_content: z.string().nullable().optional(),
})

/** An item of a stored response, by its id (resolved in inference/responses.ts). */
const itemReferenceSchema = z.looseObject({
  type: z.literal('item_reference'),
  id: z.string().min(1).max(256),
})

const itemSchemas = new Map<unknown, z.ZodType>([
  ['item_reference', itemReferenceSchema],
  ['message', messageItemSchema],
  ['function_call', functionCallItemSchema],
  ['function_call_output', functionCallOutputItemSchema],
  ['reasoning', reasoningItemSchema],
])

const inputItemSchema = pickedUnion(
  [
    messageItemSchema,
    functionCallItemSchema,
    functionCallOutputItemSchema,
    reasoningItemSchema,
    itemReferenceSchema,
  ],
  (input) => {
    if (!isPlainObject(input)) return undefined
    // The "easy" message form has a role and no type.
    if (input.type === undefined) return messageItemSchema
    return (
      itemSchemas.get(input.type) ??
      unsupported(
        `input item type ${String(input.type)} is not supported (message, function_call, function_call_output, reasoning, item_reference)`,
        ['type'],
      )
    )
  },
  'an input item object',
)

const inputSchema = pickedUnion(
  [z.string(), z.array(inputItemSchema).min(1).max(10_000)],
  (input) =>
    typeof input === 'string'
      ? z.string()
      : Array.isArray(input)
        ? z.array(inputItemSchema).min(1).max(10_000)
        : undefined,
  'a string or an array of input items',
)

// ---------------------------------------------------------------------------------------------
// Tools

const functionToolSchema = z.looseObject({
  type: z.literal('function'),
  name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'tool names are 1-64 characters of a-z, A-Z, 0-9, _ and -'),
  description: z.string().nullable().optional(),
  parameters: z.record(z.string(), z.unknown()).nullable().optional(),
  strict: z.boolean().nullable().optional(),
})

const toolSchema = pickedUnion(
  [functionToolSchema],
  (input) => {
    if (!isPlainObject(input)) return undefined
    if (input.type === undefined || input.type === 'function') return functionToolSchema
    return unsupported(
      `built-in tool ${String(input.type)} is not supported: only function tools (type "function") are`,
      ['type'],
    )
  },
  'a tool object',
)

const toolChoiceModeSchema = z.enum(['none', 'auto', 'required'])
const functionChoiceSchema = z.looseObject({ type: z.literal('function'), name: z.string().min(1) })

const toolChoiceSchema = pickedUnion(
  [toolChoiceModeSchema, functionChoiceSchema],
  (input) => {
    if (typeof input === 'string') return toolChoiceModeSchema
    if (!isPlainObject(input)) return undefined
    if (input.type === undefined || input.type === 'function') return functionChoiceSchema
    return unsupported(
      `tool_choice type ${String(input.type)} is not supported: use none, auto, required or a function`,
      ['type'],
    )
  },
  'a string or a tool choice object',
)

// ---------------------------------------------------------------------------------------------
// Output format, reasoning

const textFormatSchema = typeUnion([
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'name is 1-64 characters of a-z, A-Z, 0-9, _ and -'),
    schema: z.record(z.string(), z.unknown()),
    description: z.string().optional(),
    strict: z.boolean().nullable().optional(),
  }),
])

const textSchema = z.looseObject({
  format: textFormatSchema.optional(),
  verbosity: z.enum(['low', 'medium', 'high']).nullable().optional(),
})

const reasoningSchema = z.looseObject({
  effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullable().optional(),
  /** The reasoning an upstream gives is returned as the summary, whatever is asked here. */
  summary: z.enum(['auto', 'concise', 'detailed']).nullable().optional(),
  generate_summary: z.enum(['auto', 'concise', 'detailed']).nullable().optional(),
})

// ---------------------------------------------------------------------------------------------
// The request

const ignored = Object.fromEntries(IGNORED_FIELDS.map((f) => [f, z.unknown().optional()])) as Record<
  (typeof IGNORED_FIELDS)[number],
  z.ZodOptional<z.ZodUnknown>
>

export const responsesRequestSchema = z.strictObject({
  model: modelSlugSchema,
  input: inputSchema,
  instructions: z.string().nullable().optional(),
  tools: z.array(toolSchema).max(512).optional(),
  tool_choice: toolChoiceSchema.optional(),
  parallel_tool_calls: z.boolean().nullable().optional(),
  text: textSchema.optional(),
  max_output_tokens: z.number().int().positive().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  reasoning: reasoningSchema.nullable().optional(),
  metadata: metadataSchema.nullable().optional(),
  user: z.string().max(256).optional(),
  stream: z.boolean().nullable().optional(),
  /** Keep the answer for previous_response_id and GET /v1/responses/{id} (default true, as OpenAI's). */
  store: z.boolean().nullable().optional(),
  previous_response_id: z.string().min(1).max(256).nullable().optional(),
  background: z
    .boolean()
    .nullable()
    .refine((b) => b !== true, {
      message: 'background responses are not supported',
      params: { code: 'unsupported_parameter' },
    })
    .optional(),
  // Junction's routing extensions, as on chat completions (checked by the chat schema).
  provider: z.unknown().optional(),
  model_routing_config: z.unknown().optional(),
  ...ignored,
})

export type ResponsesRequest = z.output<typeof responsesRequestSchema>
export type ResponsesInputItem = z.output<typeof inputItemSchema>
export type ResponsesInputPart = z.output<typeof inputPartSchema>
export type ResponsesFunctionTool = z.output<typeof functionToolSchema>

export function parseResponsesRequest(body: unknown): ResponsesRequest {
  return parseRequestBody(responsesRequestSchema, body)
}

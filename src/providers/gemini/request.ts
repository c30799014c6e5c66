import { invalidRequest } from '../../errors.ts'
import {
  allowedToolName,
  inlineFileData,
  parseArguments,
  parseDataUrl,
  refuseUnsupported,
  resolveReasoning,
  unsupportedPart,
  type UnsupportedParam,
} from '../shared/request.ts'
import { mediaTypeOfName } from '../../files/content-type.ts'
import {
  isKnownContentPart,
  type AssistantMessage,
  type ChatMessage,
  type ChatRequest,
  type ContentPart,
  type EmbeddingsRequest,
  type InstructionMessage,
  type ToolChoice,
} from '../types.ts'
import { isEmptyObjectSchema, toGeminiSchema } from './schema.ts'
import type {
  GeminiContent,
  GeminiCountTokensRequest,
  GeminiEmbedRequest,
  GeminiFunctionDeclaration,
  GeminiGenerationConfig,
  GeminiPart,
  GeminiRequest,
  GeminiThinkingConfig,
} from './wire.ts'

// OpenAI chat request → Gemini generateContent request. Pure: throws a 400 GatewayError for what
// the client sent that Gemini cannot do; the provider table in docs/operators/providers.md lists each field's fate.

/** `format` of the reasoning_details Junction produces for Gemini, and restores on the next turn. */
export const GEMINI_REASONING_FORMAT = 'google-gemini-v1'

/** Thinking budgets (Gemini 2.5) by effort. */
const effortBudgets = { low: 1024, medium: 8192, high: 24576 } as const

/** Gemini's reason for each field `refuseUnsupported` turns away. `n` is refused by the schema. */
const unsupported: Record<UnsupportedParam, string> = {
  logit_bias: 'no token biasing',
  logprobs: 'log probabilities are not translated',
  top_logprobs: 'log probabilities are not translated',
  web_search_options: 'search grounding is not translated',
  modalities: 'text output only',
  audio: 'text output only',
}

/**
 * Gemini 2.5 takes a token budget (0 turns thinking off on Flash models; Pro cannot stop thinking);
 * Gemini 3 takes a level and thinks always: a `reasoning.max_tokens` becomes `low` up to
 * GEMINI3_LOW_BUDGET tokens and `high` above (a budget is only a legacy field there, and sending both
 * is a 400). Thought summaries are asked for unless `exclude`.
 * https://ai.google.dev/gemini-api/docs/thinking
 */
/** The largest `reasoning.max_tokens` sent to Gemini 3 as `thinkingLevel: low` (2.5's low effort × 4). */
export const GEMINI3_LOW_BUDGET = 4096

export function toThinkingConfig(req: ChatRequest, model: string): GeminiThinkingConfig | undefined {
  const r = resolveReasoning(req)
  if (!r) return undefined
  const gemini3 = /^gemini-3/.test(model)
  if (!r.enabled) {
    if (gemini3) return { thinkingLevel: 'low' }
    return /flash/.test(model) ? { thinkingBudget: 0 } : undefined
  }
  const includeThoughts = !r.exclude
  if (r.maxTokens !== undefined) {
    if (gemini3) return { thinkingLevel: r.maxTokens <= GEMINI3_LOW_BUDGET ? 'low' : 'high', includeThoughts }
    return { thinkingBudget: r.maxTokens, includeThoughts }
  }
  if (r.effort === undefined) return { includeThoughts }
  if (gemini3) return { thinkingLevel: r.effort === 'low' ? 'low' : 'high', includeThoughts }
  return { thinkingBudget: effortBudgets[r.effort], includeThoughts }
}

/** Gemini has no tool call ids: Junction makes them from the call's position and name. */
export function toolCallId(index: number, name: string): string {
  return `call_${index}_${name}`
}

/** The countTokens body for what `toGeminiRequest` would send. */
export function toGeminiCountTokensRequest(
  req: ChatRequest,
  upstreamModel: string,
): GeminiCountTokensRequest {
  return {
    generateContentRequest: { model: `models/${upstreamModel}`, ...toGeminiRequest(req, upstreamModel) },
  }
}

export function toGeminiRequest(req: ChatRequest, upstreamModel: string): GeminiRequest {
  refuseUnsupported(req, 'Gemini', unsupported)
  const system: GeminiPart[] = []
  const contents: GeminiContent[] = []
  /** tool_call_id → function name, from the assistant messages so far (the latest one wins). */
  const toolNames = new Map<string, string>()

  req.messages.forEach((m, i) => {
    const at = `messages[${i}]`
    if (m.role === 'system' || m.role === 'developer') {
      system.push(...toSystemParts(m, at))
      return
    }
    if (m.role === 'assistant') {
      append(contents, 'model', toModelParts(m, at, toolNames))
      return
    }
    if (m.role === 'tool') {
      const name = toolNames.get(m.tool_call_id)
      if (name === undefined) {
        throw invalidRequest(
          'invalid_value',
          'tool_call_id matches no tool call of an earlier assistant message',
          `${at}.tool_call_id`,
        )
      }
      append(contents, 'user', [{ functionResponse: { name, response: toFunctionResponse(m.content) } }])
      return
    }
    append(contents, 'user', toUserParts(m.content, `${at}.content`))
  })

  if (contents.length === 0) {
    throw invalidRequest(
      'invalid_value',
      'Gemini models need at least one user or assistant message besides system messages',
      'messages',
    )
  }
  const body: GeminiRequest = { contents }
  if (system.length > 0) body.systemInstruction = { parts: system }
  Object.assign(body, toTools(req))

  const config: GeminiGenerationConfig = {}
  if (req.temperature !== undefined) config.temperature = req.temperature
  if (req.top_p !== undefined) config.topP = req.top_p
  const max = req.max_completion_tokens ?? req.max_tokens
  if (max !== undefined && max !== null) config.maxOutputTokens = max
  const stop = typeof req.stop === 'string' ? [req.stop] : (req.stop ?? [])
  if (stop.length > 0) config.stopSequences = stop
  if (typeof req.seed === 'number') config.seed = req.seed
  if (req.presence_penalty !== undefined) config.presencePenalty = req.presence_penalty
  if (req.frequency_penalty !== undefined) config.frequencyPenalty = req.frequency_penalty
  const format = req.response_format
  if (format?.type === 'json_object' || format?.type === 'json_schema')
    config.responseMimeType = 'application/json'
  if (format?.type === 'json_schema' && format.json_schema?.schema !== undefined) {
    config.responseSchema = toGeminiSchema(format.json_schema.schema)
  }
  const thinking = toThinkingConfig(req, upstreamModel)
  if (thinking) config.thinkingConfig = thinking
  if (Object.keys(config).length > 0) body.generationConfig = config
  return body
}

/** Appends, merging into the previous content when the role repeats. */
function append(contents: GeminiContent[], role: GeminiContent['role'], parts: GeminiPart[]): void {
  if (parts.length === 0) return
  const last = contents.at(-1)
  if (last?.role === role) last.parts.push(...parts)
  else contents.push({ role, parts })
}

function toSystemParts(m: InstructionMessage, at: string): GeminiPart[] {
  if (typeof m.content === 'string') return m.content === '' ? [] : [{ text: m.content }]
  return m.content.flatMap((part, j): GeminiPart[] => {
    if (!isKnownContentPart(part) || part.type !== 'text') {
      throw invalidRequest(
        'invalid_value',
        `${m.role} messages take text only on Gemini models`,
        `${at}.content[${j}]`,
      )
    }
    return part.text === '' ? [] : [{ text: part.text }]
  })
}

function toUserParts(content: ChatMessage['content'], at: string): GeminiPart[] {
  if (typeof content === 'string') return content === '' ? [] : [{ text: content }]
  return (content ?? []).flatMap((part, j) => toUserPart(part, `${at}[${j}]`))
}

function toUserPart(part: ContentPart, at: string): GeminiPart[] {
  if (!isKnownContentPart(part)) throw unsupportedPart('Gemini', part.type, at)
  switch (part.type) {
    case 'text':
      return part.text === '' ? [] : [{ text: part.text }]
    case 'image_url': {
      const url = part.image_url.url
      if (/^https?:\/\//i.test(url)) {
        // Gemini fetches public and signed URLs itself; it wants a media type, guessed from the path.
        return [
          { fileData: { mimeType: mediaTypeOfName(new URL(url).pathname) ?? 'image/jpeg', fileUri: url } },
        ]
      }
      const data = parseDataUrl(url)
      if (!data) {
        throw invalidRequest(
          'invalid_value',
          'an image must be an http(s) URL or a base64 data URL',
          `${at}.image_url.url`,
        )
      }
      return [{ inlineData: { mimeType: data.mediaType, data: data.base64 } }]
    }
    case 'input_audio': {
      const { data, format } = part.input_audio
      return [{ inlineData: { mimeType: `audio/${format}`, data } }]
    }
    case 'file': {
      const { mediaType: mimeType, base64 } = inlineFileData(part, at)
      if (mimeType === undefined) {
        throw invalidRequest(
          'invalid_value',
          'file_data needs a data URL or a filename that tells its type',
          `${at}.file.file_data`,
        )
      }
      return [{ inlineData: { mimeType, data: base64 } }]
    }
    case 'refusal':
      throw unsupportedPart('Gemini', part.type, at)
  }
}

/**
 * An assistant turn as Gemini's `model` content. Thought signatures from reasoning_details go back
 * onto the part they came with: a function call's (matched by tool call id), else the text part.
 */
function toModelParts(m: AssistantMessage, at: string, toolNames: Map<string, string>): GeminiPart[] {
  const parts: GeminiPart[] = []
  let text = ''
  if (typeof m.content === 'string') text = m.content
  else if (Array.isArray(m.content)) {
    m.content.forEach((part, j) => {
      if (isKnownContentPart(part) && part.type === 'text') text += part.text
      else if (part.type !== 'refusal') {
        throw invalidRequest(
          'invalid_value',
          'assistant messages take text parts only',
          `${at}.content[${j}]`,
        )
      }
    })
  }
  if (text !== '') parts.push({ text })

  const byCall = new Map<string, string>()
  let loose: string | undefined
  for (const d of m.reasoning_details ?? []) {
    const data = d.data
    if (d.format !== GEMINI_REASONING_FORMAT || d.type !== 'reasoning.encrypted' || typeof data !== 'string')
      continue
    if (typeof d.id === 'string' && d.id !== '') byCall.set(d.id, data)
    else loose ??= data
  }

  m.tool_calls?.forEach((call, j) => {
    toolNames.set(call.id, call.function.name)
    const part: GeminiPart = {
      functionCall: {
        name: call.function.name,
        args: parseArguments(call.function.arguments, `${at}.tool_calls[${j}].function.arguments`),
      },
    }
    const sig = byCall.get(call.id)
    if (sig !== undefined) part.thoughtSignature = sig
    parts.push(part)
  })
  if (loose !== undefined) {
    const target = parts.find((p) => p.text !== undefined) ?? parts[0]
    if (target) target.thoughtSignature ??= loose
  }
  return parts
}

/** functionResponse.response is a JSON object: a tool result that is one is sent as is, else wrapped. */
function toFunctionResponse(content: ChatMessage['content']): Record<string, unknown> {
  const text =
    typeof content === 'string'
      ? content
      : (content ?? []).map((p) => (isKnownContentPart(p) && p.type === 'text' ? p.text : '')).join('')
  try {
    const value: unknown = JSON.parse(text)
    if (typeof value === 'object' && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>
  } catch {
    // plain text
  }
  return { result: text }
}

function toTools(req: ChatRequest): Pick<GeminiRequest, 'tools' | 'toolConfig'> {
  const declarations: GeminiFunctionDeclaration[] = (req.tools ?? []).map((t, i) => {
    if (t.type !== 'function') {
      throw invalidRequest(
        'unsupported_parameter',
        'Gemini models take function tools only',
        `tools[${i}].type`,
      )
    }
    const fn = t.function
    const d: GeminiFunctionDeclaration = { name: fn.name }
    if (fn.description !== undefined) d.description = fn.description
    if (fn.parameters !== undefined) {
      const params = toGeminiSchema(fn.parameters)
      if (!isEmptyObjectSchema(params)) d.parameters = params
    }
    return d
  })
  if (declarations.length === 0) return {}

  const choice: ToolChoice = req.tool_choice ?? 'auto'
  let config: NonNullable<GeminiRequest['toolConfig']>['functionCallingConfig']
  if (choice === 'none') config = { mode: 'NONE' }
  else if (choice === 'auto') config = { mode: 'AUTO' }
  else if (choice === 'required') config = { mode: 'ANY' }
  else if (choice.type === 'function') {
    const name = choice.function.name
    if (!declarations.some((d) => d.name === name)) {
      throw invalidRequest(
        'invalid_value',
        `tool_choice names ${JSON.stringify(name)}, which is not in tools`,
        'tool_choice.function.name',
      )
    }
    config = { mode: 'ANY', allowedFunctionNames: [name] }
  } else if (choice.type === 'allowed_tools') {
    const allowed = choice.allowed_tools
    const names = allowed.tools.flatMap(allowedToolName).filter((n) => declarations.some((d) => d.name === n))
    if (names.length === 0) {
      throw invalidRequest(
        'invalid_value',
        'tool_choice.allowed_tools names none of the tools',
        'tool_choice.allowed_tools.tools',
      )
    }
    // allowedFunctionNames only binds in ANY mode; in AUTO the other tools are left out instead.
    return {
      tools: [{ functionDeclarations: declarations.filter((d) => names.includes(d.name)) }],
      toolConfig: { functionCallingConfig: { mode: allowed.mode === 'required' ? 'ANY' : 'AUTO' } },
    }
  } else {
    throw invalidRequest(
      'unsupported_parameter',
      'Gemini models take function tools only',
      'tool_choice.type',
    )
  }
  return { tools: [{ functionDeclarations: declarations }], toolConfig: { functionCallingConfig: config } }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

/** OpenAI-style `input_type` hints → Gemini task types; Gemini's own names pass as they are. */
const taskTypes: Record<string, string> = {
  query: 'RETRIEVAL_QUERY',
  search_query: 'RETRIEVAL_QUERY',
  document: 'RETRIEVAL_DOCUMENT',
  search_document: 'RETRIEVAL_DOCUMENT',
  classification: 'CLASSIFICATION',
  clustering: 'CLUSTERING',
  semantic_similarity: 'SEMANTIC_SIMILARITY',
}
const geminiTaskTypes = new Set([
  'RETRIEVAL_QUERY',
  'RETRIEVAL_DOCUMENT',
  'SEMANTIC_SIMILARITY',
  'CLASSIFICATION',
  'CLUSTERING',
  'QUESTION_ANSWERING',
  'FACT_VERIFICATION',
  'CODE_RETRIEVAL_QUERY',
])

export function toGeminiEmbedRequest(req: EmbeddingsRequest, upstreamModel: string): GeminiEmbedRequest {
  const inputs = typeof req.input === 'string' ? [req.input] : req.input
  if (!inputs.every((x): x is string => typeof x === 'string')) {
    throw invalidRequest('unsupported_parameter', 'Gemini embeddings take text, not token ids', 'input')
  }
  let taskType: string | undefined
  if (req.input_type !== undefined) {
    taskType = taskTypes[req.input_type.toLowerCase()] ?? req.input_type.toUpperCase()
    if (!geminiTaskTypes.has(taskType)) {
      throw invalidRequest(
        'invalid_value',
        `input_type ${JSON.stringify(req.input_type)} has no Gemini task type`,
        'input_type',
      )
    }
  }
  return {
    requests: inputs.map((text) => {
      const r: GeminiEmbedRequest['requests'][number] = {
        model: `models/${upstreamModel}`,
        content: { parts: [{ text }] },
      }
      if (taskType !== undefined) r.taskType = taskType
      if (req.dimensions !== undefined) r.outputDimensionality = req.dimensions
      return r
    }),
  }
}

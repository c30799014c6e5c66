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
import {
  isKnownContentPart,
  type AssistantMessage,
  type ChatMessage,
  type ChatRequest,
  type ContentPart,
  type InstructionMessage,
  type ToolChoice,
  type ToolMessage,
} from '../types.ts'
import type {
  AnthropicCacheControl,
  AnthropicContentBlock,
  AnthropicImageBlock,
  AnthropicMessageParam,
  AnthropicRequest,
  AnthropicTextBlock,
  AnthropicThinkingConfig,
  AnthropicTool,
  AnthropicToolChoice,
} from './wire.ts'
import { nativeAnthropicOf } from './wire.ts'
import type { ReasoningDetail } from '../../domain/chat.ts'

// OpenAI chat request → Anthropic Messages request. Pure: throws a 400 GatewayError for what the
// client sent that Anthropic cannot do; the provider table in docs/operators/providers.md lists each field's fate.

/** `format` of the reasoning_details Junction produces for Claude, and restores on the next turn. */
export const ANTHROPIC_REASONING_FORMAT = 'anthropic-claude-v1'

/** Used when the client gives no max_completion_tokens: Anthropic requires max_tokens. */
export const DEFAULT_MAX_TOKENS = 8192
/** Anthropic's smallest thinking budget. */
export const MIN_THINKING_BUDGET = 1024
/** Thinking budget when only an effort is given and no max_completion_tokens to take a share of. */
const effortBudgets = { low: 2048, medium: 8192, high: 16384 } as const
/** Share of max_completion_tokens given to thinking, by effort. */
const effortShares = { low: 0.2, medium: 0.5, high: 0.8 } as const

const imageMediaTypes = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp'])

/** Anthropic's reason for each field `refuseUnsupported` turns away. `n` is refused by the schema. */
const unsupported: Record<UnsupportedParam, string> = {
  logit_bias: 'no token biasing',
  logprobs: 'no log probabilities',
  top_logprobs: 'no log probabilities',
  web_search_options: 'use a model with web search',
  modalities: 'text output only',
  audio: 'text output only',
}

/** max_tokens and the thinking block, which Anthropic wants to agree (budget < max_tokens). */
function toLimits(req: ChatRequest): { maxTokens: number; thinking?: AnthropicThinkingConfig } {
  const clientMax = req.max_completion_tokens ?? req.max_tokens ?? undefined
  const reasoning = resolveReasoning(req)
  if (!reasoning?.enabled) return { maxTokens: clientMax ?? DEFAULT_MAX_TOKENS }

  let budget: number
  if (reasoning.maxTokens !== undefined) budget = Math.max(MIN_THINKING_BUDGET, reasoning.maxTokens)
  else if (clientMax !== undefined)
    budget = Math.max(MIN_THINKING_BUDGET, Math.floor(clientMax * effortShares[reasoning.effort ?? 'medium']))
  else budget = effortBudgets[reasoning.effort ?? 'medium']

  if (clientMax === undefined) return { maxTokens: budget + DEFAULT_MAX_TOKENS, thinking: thinkingOf(budget) }
  if (budget >= clientMax) {
    const param = req.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens'
    throw invalidRequest(
      'invalid_value',
      `${param} (${clientMax}) must be larger than the thinking budget (${budget}) on Anthropic models; ` +
        `raise it or lower reasoning.max_tokens`,
      param,
    )
  }
  return { maxTokens: clientMax, thinking: thinkingOf(budget) }
}

const thinkingOf = (budget: number): AnthropicThinkingConfig => ({ type: 'enabled', budget_tokens: budget })

export function toAnthropicRequest(req: ChatRequest, upstreamModel: string): AnthropicRequest {
  refuseUnsupported(req, 'Anthropic', unsupported)
  const { maxTokens, thinking } = toLimits(req)
  const system: AnthropicTextBlock[] = []
  const messages: AnthropicMessageParam[] = []
  const toolIds = new Map<string, string>()

  req.messages.forEach((m, i) => {
    const at = `messages[${i}]`
    if (m.role === 'system' || m.role === 'developer') {
      system.push(...toSystemBlocks(m, at))
      return
    }
    const content =
      m.role === 'assistant'
        ? toAssistantBlocks(m, at, toolIds)
        : m.role === 'tool'
          ? [toToolResult(m, at, toolIds)]
          : toUserBlocks(m.content, `${at}.content`)
    if (content.length === 0) return
    append(messages, m.role === 'assistant' ? 'assistant' : 'user', content)
  })

  if (messages.length === 0) {
    throw invalidRequest(
      'invalid_value',
      'Anthropic models need at least one user or assistant message besides system messages',
      'messages',
    )
  }
  trimFinalAssistant(messages)

  const body: AnthropicRequest = { model: upstreamModel, max_tokens: maxTokens, messages }
  if (json(req) === 'object') {
    // Claude has no "any JSON object" mode: ask for it in the system prompt.
    system.push({ type: 'text', text: 'Respond with a single valid JSON object and nothing else.' })
  }
  if (system.length > 0) body.system = system
  if (thinking) {
    // Anthropic rejects temperature and top_p with extended thinking; dropped (docs/operators/providers.md).
    body.thinking = thinking
  } else {
    // Anthropic's range is 0–1; OpenAI's 0–2. Values above 1 are clamped (docs/operators/providers.md).
    if (req.temperature !== undefined) body.temperature = Math.min(req.temperature, 1)
    // Current Claude models refuse temperature and top_p together; temperature wins (docs/operators/providers.md).
    if (req.top_p !== undefined && req.temperature === undefined) body.top_p = req.top_p
  }
  const stop = typeof req.stop === 'string' ? [req.stop] : (req.stop ?? [])
  if (stop.length > 0) body.stop_sequences = stop
  Object.assign(body, toTools(req))
  const schema = json(req) === 'schema' ? jsonSchemaOf(req) : undefined
  if (schema) body.output_config = { format: { type: 'json_schema', schema } }
  if (typeof req.user === 'string' && req.user !== '') body.metadata = { user_id: req.user }
  if (req.stream) body.stream = true
  return body
}

function json(req: ChatRequest): 'object' | 'schema' | undefined {
  const t = req.response_format?.type
  return t === 'json_object' ? 'object' : t === 'json_schema' ? 'schema' : undefined
}

function jsonSchemaOf(req: ChatRequest): Record<string, unknown> {
  const format = req.response_format
  return (format?.type === 'json_schema' ? format.json_schema.schema : undefined) ?? { type: 'object' }
}

/** Appends, merging into the previous message when the role repeats (Anthropic alternates roles). */
function append(
  messages: AnthropicMessageParam[],
  role: AnthropicMessageParam['role'],
  content: AnthropicContentBlock[],
): void {
  const last = messages.at(-1)
  if (last?.role !== role) {
    messages.push({ role, content })
    return
  }
  last.content.push(...content)
  // tool_result blocks must open the user turn that follows a tool_use turn.
  if (role === 'user') {
    const results = last.content.filter((b) => b.type === 'tool_result')
    if (results.length > 0)
      last.content = [...results, ...last.content.filter((b) => b.type !== 'tool_result')]
  }
}

/** A prefilled final assistant turn may not end in whitespace (Anthropic 400). */
function trimFinalAssistant(messages: AnthropicMessageParam[]): void {
  const last = messages.at(-1)
  if (last?.role !== 'assistant') return
  const block = last.content.at(-1)
  if (block?.type === 'text') block.text = block.text.trimEnd()
  if (block?.type === 'text' && block.text === '') last.content.pop()
  if (last.content.length === 0) messages.pop()
}

function cacheControlOf(part: ContentPart): { cache_control?: AnthropicCacheControl } {
  const cc = part.cache_control
  // Not in the schema (an Anthropic extension): passed on as the client wrote it.
  if (typeof cc === 'object' && cc !== null && 'type' in cc && cc.type === 'ephemeral') {
    return { cache_control: cc as AnthropicCacheControl }
  }
  return {}
}

function toSystemBlocks(m: InstructionMessage, at: string): AnthropicTextBlock[] {
  if (typeof m.content === 'string') return m.content === '' ? [] : [{ type: 'text', text: m.content }]
  return m.content.flatMap((part, j): AnthropicTextBlock[] => {
    if (!isKnownContentPart(part) || part.type !== 'text') {
      throw invalidRequest(
        'invalid_value',
        `${m.role} messages take text only on Anthropic models`,
        `${at}.content[${j}]`,
      )
    }
    return part.text === '' ? [] : [{ type: 'text', text: part.text, ...cacheControlOf(part) }]
  })
}

function toUserBlocks(content: ChatMessage['content'], at: string): AnthropicContentBlock[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', text: content }]
  return (content ?? []).flatMap((part, j) => toUserBlock(part, `${at}[${j}]`))
}

function toUserBlock(part: ContentPart, at: string): AnthropicContentBlock[] {
  if (!isKnownContentPart(part)) throw unsupportedPart('Anthropic', part.type, at)
  switch (part.type) {
    case 'text':
      return part.text === '' ? [] : [{ type: 'text', text: part.text, ...cacheControlOf(part) }]
    case 'image_url':
      return [{ ...toImage(part.image_url.url, `${at}.image_url.url`), ...cacheControlOf(part) }]
    case 'file': {
      const { mediaType, base64 } = inlineFileData(part, at)
      if (mediaType === 'application/pdf') {
        return [
          {
            type: 'document',
            source: { type: 'base64', media_type: mediaType, data: base64 },
            ...cacheControlOf(part),
          },
        ]
      }
      if (mediaType === 'text/plain') {
        const text = Buffer.from(base64, 'base64').toString('utf8')
        return [
          {
            type: 'document',
            source: { type: 'text', media_type: mediaType, data: text },
            ...cacheControlOf(part),
          },
        ]
      }
      if (mediaType !== undefined && imageMediaTypes.has(mediaType)) {
        return [
          {
            type: 'image',
            source: { type: 'base64', media_type: mediaType, data: base64 },
            ...cacheControlOf(part),
          },
        ]
      }
      throw invalidRequest(
        'invalid_value',
        'Anthropic models take PDF, plain text and image (jpeg, png, gif, webp) files only',
        `${at}.file.file_data`,
      )
    }
    case 'input_audio':
    case 'refusal':
      throw unsupportedPart('Anthropic', part.type, at)
  }
}

function toImage(url: string, at: string): AnthropicImageBlock {
  if (/^https?:\/\//i.test(url)) return { type: 'image', source: { type: 'url', url } }
  const data = parseDataUrl(url)
  if (data === undefined) {
    throw invalidRequest('invalid_value', 'an image must be an http(s) URL or a base64 data URL', at)
  }
  if (!imageMediaTypes.has(data.mediaType)) {
    throw invalidRequest(
      'invalid_value',
      `image type ${data.mediaType} is not supported by Anthropic models (jpeg, png, gif, webp)`,
      at,
    )
  }
  return { type: 'image', source: { type: 'base64', media_type: data.mediaType, data: data.base64 } }
}

/** Anthropic tool_use ids are `[a-zA-Z0-9_-]+`; ids from other providers are made to fit, the same way both sides. */
function toToolUseId(id: string): string {
  return id.replace(/[^a-zA-Z0-9_-]/g, '_')
}

/** Restores thinking blocks from reasoning_details (Claude's own only: signatures are per provider). */
function toThinkingBlocks(details: ReasoningDetail[] | undefined): AnthropicContentBlock[] {
  if (!details) return []
  return [...details]
    .filter((d) => d.format === ANTHROPIC_REASONING_FORMAT)
    .sort((a, b) => (a.index ?? 0) - (b.index ?? 0))
    .flatMap((d): AnthropicContentBlock[] => {
      if (d.type === 'reasoning.text' && typeof d.signature === 'string' && d.signature !== '') {
        return [{ type: 'thinking', thinking: d.text ?? '', signature: d.signature }]
      }
      if (d.type === 'reasoning.encrypted' && typeof d.data === 'string') {
        return [{ type: 'redacted_thinking', data: d.data }]
      }
      // Thinking text without a signature cannot be verified by Anthropic: it is not sent back.
      return []
    })
}

function toAssistantBlocks(
  m: AssistantMessage,
  at: string,
  toolIds: Map<string, string>,
): AnthropicContentBlock[] {
  const blocks = toThinkingBlocks(m.reasoning_details)
  if (typeof m.content === 'string') {
    if (m.content !== '') blocks.push({ type: 'text', text: m.content })
  } else if (Array.isArray(m.content)) {
    m.content.forEach((part, j) => {
      if (isKnownContentPart(part) && part.type === 'text') {
        if (part.text !== '') blocks.push({ type: 'text', text: part.text, ...cacheControlOf(part) })
      } else if (part.type !== 'refusal') {
        throw invalidRequest(
          'invalid_value',
          'assistant messages take text parts only',
          `${at}.content[${j}]`,
        )
      }
    })
  }
  m.tool_calls?.forEach((call, j) => {
    const id = toToolUseId(call.id)
    toolIds.set(call.id, id)
    blocks.push({
      type: 'tool_use',
      id,
      name: call.function.name,
      input: parseArguments(call.function.arguments, `${at}.tool_calls[${j}].function.arguments`),
    })
  })
  return blocks
}

function toToolResult(m: ToolMessage, at: string, toolIds: Map<string, string>): AnthropicContentBlock {
  const id = toolIds.get(m.tool_call_id) ?? toToolUseId(m.tool_call_id)
  if (typeof m.content === 'string') return { type: 'tool_result', tool_use_id: id, content: m.content }
  const content = m.content.flatMap((part, j): (AnthropicTextBlock | AnthropicImageBlock)[] => {
    const partAt = `${at}.content[${j}]`
    if (isKnownContentPart(part) && part.type === 'text') {
      return part.text === '' ? [] : [{ type: 'text', text: part.text }]
    }
    if (isKnownContentPart(part) && part.type === 'image_url') {
      return [toImage(part.image_url.url, `${partAt}.image_url.url`)]
    }
    throw invalidRequest('invalid_value', 'tool messages take text and image parts only', partAt)
  })
  return { type: 'tool_result', tool_use_id: id, content }
}

function toTools(req: ChatRequest): Pick<AnthropicRequest, 'tools' | 'tool_choice'> {
  let tools: AnthropicTool[] = (req.tools ?? []).map((t, i) => {
    if (t.type !== 'function') {
      throw invalidRequest(
        'unsupported_parameter',
        'Anthropic models take function tools only',
        `tools[${i}].type`,
      )
    }
    const fn = t.function
    const tool: AnthropicTool = {
      name: fn.name,
      input_schema: fn.parameters ?? { type: 'object', properties: {} },
    }
    if (fn.description !== undefined) tool.description = fn.description
    if (fn.strict === true) tool.strict = true
    return tool
  })
  if (tools.length === 0) return {}

  const choice: ToolChoice = req.tool_choice ?? 'auto'
  let toolChoice: AnthropicToolChoice
  if (choice === 'none') toolChoice = { type: 'none' }
  else if (choice === 'auto') toolChoice = { type: 'auto' }
  else if (choice === 'required') toolChoice = { type: 'any' }
  else if (choice.type === 'function') {
    const name = choice.function.name
    if (!tools.some((t) => t.name === name)) {
      throw invalidRequest(
        'invalid_value',
        `tool_choice names ${JSON.stringify(name)}, which is not in tools`,
        'tool_choice.function.name',
      )
    }
    toolChoice = { type: 'tool', name }
  } else if (choice.type === 'allowed_tools') {
    const allowed = choice.allowed_tools
    const names = new Set(allowed.tools.flatMap(allowedToolName))
    tools = tools.filter((t) => names.has(t.name))
    if (tools.length === 0) {
      throw invalidRequest(
        'invalid_value',
        'tool_choice.allowed_tools names none of the tools',
        'tool_choice.allowed_tools.tools',
      )
    }
    toolChoice = { type: allowed.mode === 'required' ? 'any' : 'auto' }
  } else {
    throw invalidRequest(
      'unsupported_parameter',
      'Anthropic models take function tools only',
      'tool_choice.type',
    )
  }
  if (req.parallel_tool_calls === false && toolChoice.type !== 'none')
    toolChoice.disable_parallel_tool_use = true
  return { tools, tool_choice: toolChoice }
}

/**
 * The body to send: a request that came in on /v1/messages goes as the client wrote it (its model the
 * deployment's, its output limit the one admission reserved); any other is translated.
 */
export function toUpstreamBody(req: ChatRequest, upstreamModel: string, stream: boolean): unknown {
  const native = nativeAnthropicOf(req)
  if (!native) return toAnthropicRequest({ ...req, stream }, upstreamModel)
  const body: Record<string, unknown> = {
    ...native.body,
    model: upstreamModel,
    max_tokens: req.max_completion_tokens ?? native.body.max_tokens,
  }
  if (stream) body.stream = true
  else delete body.stream
  return body
}

/** What count_tokens refuses: the fields of a request that only sampling reads. */
const samplingFields = [
  'max_tokens',
  'stream',
  'temperature',
  'top_p',
  'top_k',
  'stop_sequences',
  'metadata',
  'service_tier',
]

/** The body of `POST /v1/messages/count_tokens`: the prompt of the request, native or translated. */
export function toCountTokensBody(req: ChatRequest, upstreamModel: string): Record<string, unknown> {
  const native = nativeAnthropicOf(req)
  const body: Record<string, unknown> = native
    ? { ...native.body }
    : { ...toAnthropicRequest({ ...req, stream: false }, upstreamModel) }
  for (const field of samplingFields) delete body[field]
  body.model = upstreamModel
  return body
}

import { invalidRequest } from '../../errors.ts'
import { ANTHROPIC_REASONING_FORMAT } from '../../providers/anthropic/request.ts'
import { ANTHROPIC_NATIVE, type AnthropicNative } from '../../providers/anthropic/wire.ts'
import { decodeForeignDetail } from './response.ts'
import type {
  ChatMessage,
  ChatRequest,
  ContentPart,
  Tool,
  ToolCallParam,
  ToolChoice,
} from '../../providers/types.ts'
import type {
  CountTokensRequest,
  MessagesContentBlock,
  MessagesRequest,
  MessagesTool,
} from '../../schemas/messages.ts'
import type { ReasoningDetail } from '../../domain/chat.ts'

// Anthropic Messages request → the internal chat request, which every upstream reads. Pure. The
// client's body rides along under ANTHROPIC_NATIVE: an Anthropic upstream gets it as it came.

type Block = MessagesContentBlock
type TextBlock = Extract<Block, { type: 'text' }>
type ImageBlock = Extract<Block, { type: 'image' }>
type DocumentBlock = Extract<Block, { type: 'document' }>
type ToolResultBlock = Extract<Block, { type: 'tool_result' }>

export interface DialectOptions {
  /** `anthropic-beta` header values. */
  beta?: string[]
}

/** A chat request carrying the Anthropic body (see ANTHROPIC_NATIVE). */
export type ChatRequestWithNative = ChatRequest & { [ANTHROPIC_NATIVE]?: AnthropicNative }

export function toChatRequest(req: MessagesRequest, options: DialectOptions = {}): ChatRequestWithNative {
  const out: ChatRequestWithNative = {
    ...toPrompt(req),
    max_completion_tokens: req.max_tokens,
    [ANTHROPIC_NATIVE]: { body: req, beta: options.beta ?? [] },
  }
  if (req.stream === true) {
    out.stream = true
    // Usage is what message_delta reports: always asked for.
    out.stream_options = { include_usage: true }
  }
  if (req.stop_sequences !== undefined && req.stop_sequences.length > 0) out.stop = req.stop_sequences
  if (req.temperature !== undefined) out.temperature = req.temperature
  if (req.top_p !== undefined) out.top_p = req.top_p
  // Not an OpenAI field: passed on as an extra one (vLLM and others read it; Gemini ignores it).
  if (req.top_k !== undefined) out.top_k = req.top_k
  const user = req.metadata?.user_id
  if (typeof user === 'string' && user !== '') out.user = user
  return out
}

/** A count_tokens request: the prompt, with the client's body for an Anthropic upstream's own count. */
export function toCountRequest(req: CountTokensRequest, options: DialectOptions = {}): ChatRequestWithNative {
  return { ...toPrompt(req), [ANTHROPIC_NATIVE]: { body: req, beta: options.beta ?? [] } }
}

/** The prompt alone (model, system, messages, tools, thinking): what count_tokens measures, too. */
export function toPrompt(req: CountTokensRequest): ChatRequest {
  const messages: ChatMessage[] = []
  if (typeof req.system === 'string') {
    if (req.system !== '') messages.push({ role: 'system', content: req.system })
  } else if (req.system !== undefined && req.system.length > 0) {
    messages.push({ role: 'system', content: req.system.map(toTextPart) })
  }
  req.messages.forEach((m, i) => {
    const at = `messages[${i}]`
    if (typeof m.content === 'string') {
      messages.push(
        m.role === 'user' ? { role: 'user', content: m.content } : { role: 'assistant', content: m.content },
      )
      return
    }
    if (m.role === 'assistant') messages.push(toAssistant(m.content, at))
    else messages.push(...toUser(m.content, at))
  })
  const out: ChatRequest = { model: req.model, messages }
  Object.assign(out, toTools(req.tools, req.tool_choice))
  if (req.thinking?.type === 'enabled') {
    const budget = req.thinking.budget_tokens
    // The budget for upstreams that take one (Anthropic, Gemini); an effort for those that take that.
    out.reasoning = { enabled: true, max_tokens: budget, effort: effortOf(budget) }
  } else if (req.thinking?.type === 'adaptive') {
    out.reasoning = { enabled: true }
  } else if (req.thinking?.type === 'disabled') {
    out.reasoning = { enabled: false }
  }
  return out
}

/** A thinking budget as an effort, around the budgets the Anthropic adapter gives each effort. */
export function effortOf(budget: number): 'low' | 'medium' | 'high' {
  return budget < 4096 ? 'low' : budget < 12_288 ? 'medium' : 'high'
}

function cacheOf(block: { cache_control?: unknown }): { cache_control?: unknown } {
  return block.cache_control === undefined || block.cache_control === null
    ? {}
    : { cache_control: block.cache_control }
}

function toTextPart(b: TextBlock): ContentPart {
  return { type: 'text', text: b.text, ...cacheOf(b) }
}

function toImagePart(b: ImageBlock): ContentPart {
  const url = b.source.type === 'url' ? b.source.url : `data:${b.source.media_type};base64,${b.source.data}`
  return { type: 'image_url', image_url: { url }, ...cacheOf(b) }
}

function toDocumentPart(b: DocumentBlock): ContentPart {
  const s = b.source
  const filename = typeof b.title === 'string' && b.title !== '' ? b.title : undefined
  if (s.type === 'base64') {
    return {
      type: 'file',
      file: { file_data: `data:${s.media_type};base64,${s.data}`, ...(filename ? { filename } : {}) },
      ...cacheOf(b),
    }
  }
  if (s.type === 'text') {
    const data = Buffer.from(s.data, 'utf8').toString('base64')
    return {
      type: 'file',
      file: { file_data: `data:text/plain;base64,${data}`, ...(filename ? { filename } : {}) },
      ...cacheOf(b),
    }
  }
  // A URL or custom-content source only Anthropic reads: the native body carries it there, and the
  // route refuses any other upstream (anthropicOnly). Here it stands in the prompt as its reference.
  const ref = s.type === 'url' ? s.url : 'document'
  return { type: 'text', text: `[document: ${ref}]` }
}

/** A user turn: its tool results become tool messages (first, as Anthropic puts them), the rest one user message. */
function toUser(blocks: Block[], at: string): ChatMessage[] {
  const out: ChatMessage[] = []
  const parts: ContentPart[] = []
  blocks.forEach((b, j) => {
    const bAt = `${at}.content[${j}]`
    switch (b.type) {
      case 'text':
        parts.push(toTextPart(b))
        return
      case 'image':
        parts.push(toImagePart(b))
        return
      case 'document':
        parts.push(toDocumentPart(b))
        return
      case 'tool_result':
        out.push(toToolMessage(b))
        return
      default:
        throw invalidRequest('invalid_value', `user messages do not take ${b.type} blocks`, `${bAt}.type`)
    }
  })
  if (parts.length > 0) out.push({ role: 'user', content: parts })
  return out
}

function toToolMessage(b: ToolResultBlock): ChatMessage {
  // OpenAI tool messages have no error flag: an error result says so in its text.
  const prefix = b.is_error === true ? [{ type: 'text', text: 'Error:' } as ContentPart] : []
  let content: string | ContentPart[]
  if (b.content === undefined) content = b.is_error === true ? 'Error' : ''
  else if (typeof b.content === 'string') content = b.is_error === true ? `Error: ${b.content}` : b.content
  else {
    const parts = b.content.map((c): ContentPart => {
      if (c.type === 'text') return toTextPart(c)
      if (c.type === 'image') return toImagePart(c)
      return toDocumentPart(c)
    })
    content = parts.length === 0 ? '' : [...prefix, ...parts]
  }
  return { role: 'tool', tool_call_id: b.tool_use_id, content, ...cacheOf(b) }
}

function toAssistant(blocks: Block[], at: string): ChatMessage {
  const parts: ContentPart[] = []
  const calls: ToolCallParam[] = []
  const details: ReasoningDetail[] = []
  let reasoning = ''
  blocks.forEach((b, j) => {
    switch (b.type) {
      case 'text':
        parts.push(toTextPart(b))
        return
      case 'tool_use':
        calls.push({
          id: b.id,
          type: 'function',
          function: { name: b.name, arguments: JSON.stringify(b.input) },
        })
        return
      case 'thinking':
        reasoning += b.thinking
        details.push({
          type: 'reasoning.text',
          text: b.thinking,
          signature: b.signature,
          format: ANTHROPIC_REASONING_FORMAT,
          index: details.length,
        })
        return
      case 'redacted_thinking': {
        const foreign = decodeForeignDetail(b.data)
        if (foreign) {
          details.push(foreign)
          return
        }
        details.push({
          type: 'reasoning.encrypted',
          data: b.data,
          format: ANTHROPIC_REASONING_FORMAT,
          index: details.length,
        })
        return
      }
      default:
        throw invalidRequest(
          'invalid_value',
          `assistant messages do not take ${b.type} blocks`,
          `${at}.content[${j}].type`,
        )
    }
  })
  const text = parts.every((p) => p.type === 'text' && p.cache_control === undefined)
  const content =
    parts.length === 0 ? null : text ? parts.map((p) => (p as { text: string }).text).join('') : parts
  const m: ChatMessage = { role: 'assistant', content }
  if (calls.length > 0) m.tool_calls = calls
  if (reasoning !== '') m.reasoning = reasoning
  if (details.length > 0) m.reasoning_details = details
  if (m.content === null && calls.length === 0) m.content = ''
  return m
}

function toTools(
  tools: MessagesTool[] | undefined,
  choice: CountTokensRequest['tool_choice'],
): Pick<ChatRequest, 'tools' | 'tool_choice' | 'parallel_tool_calls'> {
  const out: Pick<ChatRequest, 'tools' | 'tool_choice' | 'parallel_tool_calls'> = {}
  if (tools !== undefined) {
    // Anthropic's own tools (web search, code execution, bash, text editor, …) reach an Anthropic
    // upstream in the native body; no other upstream has them (anthropicOnly).
    const custom = tools.filter(isCustomTool)
    if (custom.length > 0)
      out.tools = custom.map((t): Tool => {
        return {
          type: 'function',
          function: {
            name: t.name,
            ...(t.description !== undefined ? { description: t.description } : {}),
            parameters: t.input_schema ?? { type: 'object', properties: {} },
          },
          ...cacheOf(t),
        }
      })
  }
  if (choice !== undefined) {
    const mapped: ToolChoice =
      choice.type === 'auto'
        ? 'auto'
        : choice.type === 'any'
          ? 'required'
          : choice.type === 'none'
            ? 'none'
            : { type: 'function', function: { name: choice.name } }
    if (out.tools !== undefined) out.tool_choice = mapped
    if ('disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use === true && out.tools) {
      out.parallel_tool_calls = false
    }
  }
  return out
}

function isCustomTool(t: MessagesTool): boolean {
  return t.type === undefined || t.type === 'custom'
}

/** A part of a Messages request only an Anthropic upstream can take, and where it is. */
export interface AnthropicOnly {
  what: string
  param: string
}

/**
 * What in the request only Anthropic serves: its server and versioned client tools (web search, code
 * execution, bash, text editor, …) and document sources by URL or custom content. They reach an
 * Anthropic upstream in the native body; the route refuses the request (400 naming the first) when
 * the model may be served by any other kind of upstream.
 */
export function anthropicOnly(req: CountTokensRequest): AnthropicOnly[] {
  const out: AnthropicOnly[] = []
  req.tools?.forEach((t, i) => {
    if (!isCustomTool(t))
      out.push({
        what: `tool ${JSON.stringify(t.name)} of type ${JSON.stringify(t.type)}`,
        param: `tools[${i}].type`,
      })
  })
  const document = (b: { type: string; source?: { type: string } }, at: string) => {
    if (b.type === 'document' && (b.source?.type === 'url' || b.source?.type === 'content'))
      out.push({
        what: `a document source of type ${JSON.stringify(b.source.type)}`,
        param: `${at}.source.type`,
      })
  }
  req.messages.forEach((m, i) => {
    if (typeof m.content === 'string') return
    m.content.forEach((b, j) => {
      const at = `messages[${i}].content[${j}]`
      document(b, at)
      if (b.type === 'tool_result' && Array.isArray(b.content))
        b.content.forEach((c, k) => document(c, `${at}.content[${k}]`))
    })
  })
  return out
}

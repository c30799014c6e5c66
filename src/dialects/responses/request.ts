import type { ChatRequest } from '../../providers/types.ts'
import { chatRequestSchema, parseRequestBody } from '../../schemas/chat.ts'
import type { ResponsesInputItem, ResponsesInputPart, ResponsesRequest } from '../../schemas/responses.ts'
import type { ReasoningDetail } from '../../domain/chat.ts'

// A Responses API request → the internal chat request, so the one chat pipeline (routing, admission,
// retries, settlement, the generation record) serves it. Pure. The output of the chat schema is what
// every adapter takes: the translated request goes through it, so a Responses request can never reach
// an upstream in a shape a chat request could not.

type Message = Record<string, unknown>

/** The request's input as items: a string is one user message. */
export function inputItems(req: Pick<ResponsesRequest, 'input'>): ResponsesInputItem[] {
  return typeof req.input === 'string' ? [{ role: 'user', content: req.input }] : req.input
}

/**
 * The chat request for a validated Responses request. `items` is the conversation: the request's
 * input, after the stored turns its previous_response_id continues.
 */
export function toChatRequest(
  req: ResponsesRequest,
  items: ResponsesInputItem[] = inputItems(req),
): ChatRequest {
  const body: Record<string, unknown> = {
    model: req.model,
    messages: toChatMessages(req.instructions, items),
  }
  if (req.tools !== undefined && req.tools.length > 0) {
    body.tools = req.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description != null ? { description: t.description } : {}),
        ...(t.parameters != null ? { parameters: t.parameters } : {}),
        ...(t.strict != null ? { strict: t.strict } : {}),
      },
    }))
  }
  if (req.tool_choice !== undefined) {
    body.tool_choice =
      typeof req.tool_choice === 'string'
        ? req.tool_choice
        : { type: 'function', function: { name: req.tool_choice.name } }
  }
  if (req.parallel_tool_calls != null) body.parallel_tool_calls = req.parallel_tool_calls
  const format = req.text?.format
  if (format !== undefined && format.type !== 'text') {
    body.response_format =
      format.type === 'json_schema'
        ? {
            type: 'json_schema',
            json_schema: {
              name: format.name,
              schema: format.schema,
              ...(format.description !== undefined ? { description: format.description } : {}),
              ...(format.strict != null ? { strict: format.strict } : {}),
            },
          }
        : { type: 'json_object' }
  }
  if (req.text?.verbosity != null) body.verbosity = req.text.verbosity
  if (req.max_output_tokens != null) body.max_completion_tokens = req.max_output_tokens
  if (req.temperature != null) body.temperature = req.temperature
  if (req.top_p != null) body.top_p = req.top_p
  if (req.reasoning?.effort != null) body.reasoning_effort = req.reasoning.effort
  // `metadata` labels the response object (echoed in it), as OpenAI's does; it is not sent upstream,
  // where OpenAI's chat completions refuse it without `store`.
  if (req.user !== undefined) body.user = req.user
  if (req.provider !== undefined) body.provider = req.provider
  if (req.model_routing_config !== undefined) body.model_routing_config = req.model_routing_config
  if (req.stream === true) {
    body.stream = true
    // The completed event carries usage: the relay must pass the usage chunk on.
    body.stream_options = { include_usage: true }
  }
  return parseRequestBody(chatRequestSchema, body)
}

/**
 * `instructions` first (as a system message), then the input items in order. Responses keeps an
 * assistant turn as separate items (reasoning, message, function calls); chat wants them as one
 * assistant message, so consecutive ones are merged.
 */
export function toChatMessages(
  instructions: string | null | undefined,
  items: ResponsesInputItem[],
): Message[] {
  const messages: Message[] = []
  if (instructions != null && instructions !== '') messages.push({ role: 'system', content: instructions })
  // Reasoning, assistant messages and function calls that follow each other are one assistant turn:
  // one chat message (a user or system message, or a tool output, ends the turn).
  let assistant: Message | undefined
  const openAssistant = (): Message => {
    if (assistant === undefined) {
      assistant = { role: 'assistant', content: null }
      messages.push(assistant)
    }
    return assistant
  }
  for (const item of items) {
    switch (itemKind(item)) {
      case 'message': {
        const m = item as Extract<ResponsesInputItem, { role: string }>
        if (m.role === 'assistant') {
          const a = openAssistant()
          const parts = typeof m.content === 'string' ? [{ type: 'output_text', text: m.content }] : m.content
          let text = typeof a.content === 'string' ? a.content : ''
          for (const p of parts as { type: string; text?: string; refusal?: string }[]) {
            if (p.type === 'output_text') text += p.text ?? ''
            else if (p.type === 'refusal')
              a.refusal = ((a.refusal as string | undefined) ?? '') + (p.refusal ?? '')
          }
          a.content = text
        } else {
          assistant = undefined
          messages.push({ role: m.role, content: toChatContent(m.content) })
        }
        break
      }
      case 'function_call': {
        const c = item as Extract<ResponsesInputItem, { type: 'function_call' }>
        const a = openAssistant()
        const calls = (a.tool_calls ?? []) as unknown[]
        calls.push({ id: c.call_id, type: 'function', function: { name: c.name, arguments: c.arguments } })
        a.tool_calls = calls
        break
      }
      case 'function_call_output': {
        const o = item as Extract<ResponsesInputItem, { type: 'function_call_output' }>
        assistant = undefined
        messages.push({ role: 'tool', tool_call_id: o.call_id, content: toChatContent(o.output) })
        break
      }
      case 'item_reference':
        // Replaced by the stored item before translation (inference/responses.ts).
        break
      case 'reasoning': {
        const r = item as Extract<ResponsesInputItem, { type: 'reasoning' }>
        const text = (r.content?.length ? r.content : r.summary).map((s) => s.text).join('\n\n')
        const details = fromEncryptedContent(r.encrypted_content)
        if (text === '' && details === undefined) break
        const a = openAssistant()
        if (text !== '') a.reasoning = typeof a.reasoning === 'string' ? `${a.reasoning}\n\n${text}` : text
        if (details !== undefined)
          a.reasoning_details = [...((a.reasoning_details as unknown[]) ?? []), ...details]
        break
      }
    }
  }
  // A turn of reasoning alone (no text, no call) is not a chat message.
  return messages.filter((m) => m.role !== 'assistant' || m.content !== null || m.tool_calls !== undefined)
}

type ItemKind = 'message' | 'function_call' | 'function_call_output' | 'reasoning' | 'item_reference'

function itemKind(item: ResponsesInputItem): ItemKind {
  const type = (item as { type?: string }).type
  if (type === undefined || type === 'message') return 'message'
  return type as ItemKind
}

/** Input content as chat content; an empty list of parts is an empty text (chat needs one part). */
function toChatContent(content: string | ResponsesInputPart[]): string | Record<string, unknown>[] {
  if (typeof content === 'string') return content
  if (content.length === 0) return ''
  return content.map(toChatPart)
}

function toChatPart(part: ResponsesInputPart): Record<string, unknown> {
  const p = part as Record<string, unknown> & { type: string }
  switch (p.type) {
    case 'input_text':
      return { type: 'text', text: p.text }
    case 'input_image':
      // A file id goes where chat takes one: the image URL (docs/design/decisions.md).
      return {
        type: 'image_url',
        image_url: { url: p.image_url ?? p.file_id, ...(p.detail !== undefined ? { detail: p.detail } : {}) },
      }
    default:
      return {
        type: 'file',
        file: {
          ...(p.file_id != null ? { file_id: p.file_id } : {}),
          ...(p.file_data !== undefined ? { file_data: p.file_data } : {}),
          ...(p.filename !== undefined ? { filename: p.filename } : {}),
        },
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Reasoning that must go back upstream (thinking signatures, redacted thinking) rides in the reasoning
// item's `encrypted_content`, which clients send back unchanged: base64 of the reasoning details.

export function toEncryptedContent(details: ReasoningDetail[] | undefined): string | undefined {
  if (!details?.some((d) => typeof d.signature === 'string' || typeof d.data === 'string')) return undefined
  return Buffer.from(JSON.stringify(details)).toString('base64')
}

/** The reasoning details back; anything else (another gateway's, OpenAI's own) is not ours: ignored. */
export function fromEncryptedContent(content: string | null | undefined): ReasoningDetail[] | undefined {
  if (typeof content !== 'string' || content === '') return undefined
  try {
    const value: unknown = JSON.parse(Buffer.from(content, 'base64').toString('utf8'))
    if (
      Array.isArray(value) &&
      value.length > 0 &&
      value.every(
        (d) => typeof d === 'object' && d !== null && typeof (d as { type?: unknown }).type === 'string',
      )
    )
      return value as ReasoningDetail[]
  } catch {
    // not ours
  }
  return undefined
}

import type { ResponsesRequest } from '../../schemas/responses.ts'
import { toEncryptedContent } from './request.ts'
import type { ChatCompletion, FinishReason, ReasoningDetail, Usage } from '../../domain/chat.ts'

// A chat completion → the Responses API's Response object. Pure.
// https://platform.openai.com/docs/api-reference/responses/object

/** What a response needs besides the answer: its id and time, and the request it echoes. */
export interface ResponseMeta {
  /** `resp_…` */
  id: string
  /** Unix seconds. */
  createdAt: number
  model: string
  request: ResponsesRequest
}

/** `resp_` + the generation id's random part: one id, so a response leads to its generation record. */
export function responseId(generationId: string): string {
  return `resp_${generationId.replace(/^gen-/, '')}`
}

export interface OutputText {
  type: 'output_text'
  text: string
  annotations: unknown[]
  logprobs: unknown[]
}
export interface OutputRefusal {
  type: 'refusal'
  refusal: string
}
export interface MessageItem {
  type: 'message'
  id: string
  status: 'in_progress' | 'completed' | 'incomplete'
  role: 'assistant'
  content: (OutputText | OutputRefusal)[]
}
export interface FunctionCallItem {
  type: 'function_call'
  id: string
  call_id: string
  name: string
  arguments: string
  status: 'in_progress' | 'completed' | 'incomplete'
}
export interface ReasoningItem {
  type: 'reasoning'
  id: string
  summary: { type: 'summary_text'; text: string }[]
  encrypted_content?: string
  status?: 'in_progress' | 'completed' | 'incomplete'
}
export type OutputItem = MessageItem | FunctionCallItem | ReasoningItem

export interface ResponsesUsage {
  input_tokens: number
  input_tokens_details: { cached_tokens: number }
  output_tokens: number
  output_tokens_details: { reasoning_tokens: number }
  total_tokens: number
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed'

export interface ResponseObject {
  id: string
  object: 'response'
  created_at: number
  status: ResponseStatus
  error: { code: string; message: string } | null
  incomplete_details: { reason: 'max_output_tokens' | 'content_filter' } | null
  model: string
  output: OutputItem[]
  usage: ResponsesUsage | null
  [key: string]: unknown
}

/** Item ids: the response's random part, a kind prefix, and the item's place in the output. */
export function itemId(meta: ResponseMeta, prefix: 'msg' | 'fc' | 'rs', index: number): string {
  return `${prefix}_${meta.id.replace(/^resp_/, '')}_${index}`
}

export function toResponsesUsage(u: Usage | undefined | null): ResponsesUsage | null {
  if (!u) return null
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: u.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: u.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: u.total_tokens,
  }
}

/** `length` is the output limit; a filtered answer is incomplete too; anything else completed. */
export function statusOf(finish: FinishReason | string | null): {
  status: 'completed' | 'incomplete'
  incomplete_details: ResponseObject['incomplete_details']
} {
  if (finish === 'length')
    return { status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } }
  if (finish === 'content_filter')
    return { status: 'incomplete', incomplete_details: { reason: 'content_filter' } }
  return { status: 'completed', incomplete_details: null }
}

/** The Response object around `output`: the request's settings echoed as OpenAI does. */
export function responseObject(
  meta: ResponseMeta,
  fields: Pick<ResponseObject, 'status' | 'incomplete_details' | 'output' | 'usage'> & {
    error?: ResponseObject['error']
  },
): ResponseObject {
  const r = meta.request
  return {
    id: meta.id,
    object: 'response',
    created_at: meta.createdAt,
    status: fields.status,
    error: fields.error ?? null,
    incomplete_details: fields.incomplete_details,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    metadata: r.metadata ?? {},
    model: meta.model,
    output: fields.output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: r.previous_response_id ?? null,
    reasoning: { effort: r.reasoning?.effort ?? null, summary: r.reasoning?.summary ?? null },
    store: r.store !== false,
    temperature: r.temperature ?? null,
    text: { format: r.text?.format ?? { type: 'text' }, verbosity: r.text?.verbosity ?? 'medium' },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? null,
    truncation: 'disabled',
    usage: fields.usage,
    user: r.user ?? null,
  }
}

/** The reasoning item for an answer's reasoning; none when it has none. */
export function reasoningItem(
  meta: ResponseMeta,
  index: number,
  text: string,
  details: ReasoningDetail[] | undefined,
): ReasoningItem | undefined {
  const encrypted = toEncryptedContent(details)
  if (text === '' && encrypted === undefined) return undefined
  const item: ReasoningItem = {
    type: 'reasoning',
    id: itemId(meta, 'rs', index),
    summary: text === '' ? [] : [{ type: 'summary_text', text }],
  }
  if (encrypted !== undefined) item.encrypted_content = encrypted
  return item
}

/** A blocking chat completion as a Response. */
export function toResponse(completion: ChatCompletion, meta: ResponseMeta): ResponseObject {
  const choice = completion.choices[0]
  const output: OutputItem[] = []
  const { status, incomplete_details } = statusOf(choice?.finish_reason ?? null)
  if (choice) {
    const m = choice.message
    const reasoning = reasoningItem(meta, output.length, m.reasoning ?? '', m.reasoning_details)
    if (reasoning) output.push(reasoning)
    const content: MessageItem['content'] = []
    if (typeof m.content === 'string' && m.content !== '')
      content.push({ type: 'output_text', text: m.content, annotations: [], logprobs: [] })
    if (typeof m.refusal === 'string' && m.refusal !== '')
      content.push({ type: 'refusal', refusal: m.refusal })
    if (content.length > 0) {
      output.push({
        type: 'message',
        id: itemId(meta, 'msg', output.length),
        status: status === 'completed' ? 'completed' : 'incomplete',
        role: 'assistant',
        content,
      })
    }
    for (const call of m.tool_calls ?? []) {
      output.push({
        type: 'function_call',
        id: itemId(meta, 'fc', output.length),
        call_id: call.id,
        name: call.function.name,
        arguments: call.function.arguments,
        status: 'completed',
      })
    }
  }
  return responseObject(
    { ...meta, model: completion.model },
    { status, incomplete_details, output, usage: toResponsesUsage(completion.usage) },
  )
}

import { toErrorBody, toGatewayError } from '../../errors.ts'
import type { Logger } from '../../logger.ts'
import {
  itemId,
  reasoningItem,
  responseObject,
  statusOf,
  toResponsesUsage,
  type FunctionCallItem,
  type MessageItem,
  type OutputItem,
  type ResponseMeta,
  type ResponseObject,
  type ResponsesUsage,
} from './response.ts'
import type { ChatChunk, ReasoningDetail } from '../../domain/chat.ts'

// Chat chunks → the Responses API's typed stream events, each with its sequence_number.
// https://platform.openai.com/docs/api-reference/responses-streaming
// The translator is pure (its state is here, where a test reaches it); writeResponsesSse frames the
// events as `event: <type>\ndata: <json>\n\n`. Its pieces each take that state and push onto the
// call's `out`: the output items (openReasoning, closeReasoning, writePart, closePart, closeMessage,
// openCall), one chunk (pushChunk), and the response's ends (startResponse, finishResponse,
// failResponse). `createResponsesStreamTranslator` makes the state and binds them.

export interface ResponsesEvent {
  type: string
  sequence_number: number
  [key: string]: unknown
}

type Draft = Omit<ResponsesEvent, 'sequence_number'>

interface OpenReasoning {
  index: number
  id: string
  text: string
  /** Whether the summary part was announced (only once there is text). */
  partOpen: boolean
  details: Map<string, ReasoningDetail>
}
interface OpenMessage {
  index: number
  item: MessageItem
  /** The content part being written, if any. */
  part: { type: 'output_text' | 'refusal'; index: number; text: string } | undefined
}

/** What the translator knows so far; changed only by the functions below. */
export interface ResponsesStreamState {
  meta: ResponseMeta
  /** The next event's sequence_number. */
  seq: number
  output: OutputItem[]
  reasoning: OpenReasoning | undefined
  message: OpenMessage | undefined
  /** Function calls by the chunk's tool call index; open until the end. */
  calls: Map<number, { index: number; item: FunctionCallItem }>
  finish: string | null
  usage: ResponsesUsage | null
  /** Details that came with no reasoning open: one more reasoning item at the end. */
  looseDetails: Map<string, ReasoningDetail>
}

export interface ResponsesStreamTranslator {
  readonly state: ResponsesStreamState
  /** response.created and response.in_progress. */
  start(): ResponsesEvent[]
  /** The events for one chat chunk. */
  push(chunk: ChatChunk): ResponsesEvent[]
  /** Closes what is open, then response.completed or response.incomplete with the whole response. */
  finish(): ResponsesEvent[]
  /** An `error` event: the stream failed after it started. */
  fail(error: { code: string; message: string; param: string | null }): ResponsesEvent[]
}

type Out = ResponsesEvent[]
type ToolCallDelta = NonNullable<ChatChunk['choices'][number]['delta']['tool_calls']>[number]

function emit(s: ResponsesStreamState, out: Out, e: Draft): void {
  out.push({ ...e, sequence_number: s.seq++ } as ResponsesEvent)
}

const clone = <T>(v: T): T => structuredClone(v)

function closeReasoning(s: ResponsesStreamState, out: Out): void {
  const r = s.reasoning
  if (!r) return
  s.reasoning = undefined
  const details = [...r.details.values()]
  const item = reasoningItem(s.meta, r.index, r.text, details.length > 0 ? details : undefined) ?? {
    type: 'reasoning' as const,
    id: r.id,
    summary: [],
  }
  item.id = r.id
  if (r.partOpen) {
    const base = { item_id: r.id, output_index: r.index, summary_index: 0 }
    emit(s, out, { type: 'response.reasoning_summary_text.done', ...base, text: r.text })
    emit(s, out, {
      type: 'response.reasoning_summary_part.done',
      ...base,
      part: { type: 'summary_text', text: r.text },
    })
  }
  s.output[r.index] = item
  emit(s, out, { type: 'response.output_item.done', output_index: r.index, item: clone(item) })
}

function closePart(s: ResponsesStreamState, out: Out, m: OpenMessage): void {
  const p = m.part
  if (!p) return
  m.part = undefined
  const base = { item_id: m.item.id, output_index: m.index, content_index: p.index }
  const part =
    p.type === 'output_text'
      ? { type: 'output_text' as const, text: p.text, annotations: [], logprobs: [] }
      : { type: 'refusal' as const, refusal: p.text }
  if (p.type === 'output_text')
    emit(s, out, { type: 'response.output_text.done', ...base, text: p.text, logprobs: [] })
  else emit(s, out, { type: 'response.refusal.done', ...base, refusal: p.text })
  m.item.content.push(part)
  emit(s, out, { type: 'response.content_part.done', ...base, part: clone(part) })
}

function closeMessage(s: ResponsesStreamState, out: Out, status: MessageItem['status']): void {
  const m = s.message
  if (!m) return
  s.message = undefined
  closePart(s, out, m)
  m.item.status = status
  s.output[m.index] = m.item
  emit(s, out, { type: 'response.output_item.done', output_index: m.index, item: clone(m.item) })
}

function openReasoning(s: ResponsesStreamState, out: Out): OpenReasoning {
  if (s.reasoning) return s.reasoning
  closeMessage(s, out, 'completed')
  const index = s.output.length
  const id = itemId(s.meta, 'rs', index)
  s.reasoning = { index, id, text: '', partOpen: false, details: new Map() }
  s.output.push({ type: 'reasoning', id, summary: [] })
  emit(s, out, {
    type: 'response.output_item.added',
    output_index: index,
    item: { type: 'reasoning', id, summary: [] },
  })
  return s.reasoning
}

function writeReasoning(s: ResponsesStreamState, out: Out, text: string): void {
  const r = openReasoning(s, out)
  const base = { item_id: r.id, output_index: r.index, summary_index: 0 }
  if (!r.partOpen) {
    r.partOpen = true
    emit(s, out, {
      type: 'response.reasoning_summary_part.added',
      ...base,
      part: { type: 'summary_text', text: '' },
    })
  }
  r.text += text
  emit(s, out, { type: 'response.reasoning_summary_text.delta', ...base, delta: text })
}

/** The open message, opened (after any reasoning closes) if none is. */
function openMessage(s: ResponsesStreamState, out: Out): OpenMessage {
  closeReasoning(s, out)
  if (s.message) return s.message
  const index = s.output.length
  const item: MessageItem = {
    type: 'message',
    id: itemId(s.meta, 'msg', index),
    status: 'in_progress',
    role: 'assistant',
    content: [],
  }
  s.message = { index, item, part: undefined }
  s.output.push(item)
  emit(s, out, { type: 'response.output_item.added', output_index: index, item: clone(item) })
  return s.message
}

function writePart(s: ResponsesStreamState, out: Out, type: 'output_text' | 'refusal', delta: string): void {
  const m = openMessage(s, out)
  if (m.part && m.part.type !== type) closePart(s, out, m)
  if (!m.part) {
    m.part = { type, index: m.item.content.length, text: '' }
    const part =
      type === 'output_text' ? { type, text: '', annotations: [], logprobs: [] } : { type, refusal: '' }
    emit(s, out, {
      type: 'response.content_part.added',
      item_id: m.item.id,
      output_index: m.index,
      content_index: m.part.index,
      part,
    })
  }
  m.part.text += delta
  const base = { item_id: m.item.id, output_index: m.index, content_index: m.part.index, delta }
  if (type === 'output_text') emit(s, out, { type: 'response.output_text.delta', ...base, logprobs: [] })
  else emit(s, out, { type: 'response.refusal.delta', ...base })
}

/** A tool call's first delta opens its function_call item; its arguments stream into it. */
function writeCall(s: ResponsesStreamState, out: Out, t: ToolCallDelta): void {
  let call = s.calls.get(t.index)
  if (!call) {
    closeReasoning(s, out)
    closeMessage(s, out, 'completed')
    const index = s.output.length
    const item: FunctionCallItem = {
      type: 'function_call',
      id: itemId(s.meta, 'fc', index),
      call_id: t.id ?? `call_${index}`,
      name: t.function?.name ?? '',
      arguments: '',
      status: 'in_progress',
    }
    call = { index, item }
    s.calls.set(t.index, call)
    s.output.push(item)
    emit(s, out, { type: 'response.output_item.added', output_index: index, item: clone(item) })
  }
  const args = t.function?.arguments
  if (typeof args === 'string' && args !== '') {
    call.item.arguments += args
    emit(s, out, {
      type: 'response.function_call_arguments.delta',
      item_id: call.item.id,
      output_index: call.index,
      delta: args,
    })
  }
}

function pushChunk(s: ResponsesStreamState, chunk: ChatChunk): Out {
  const out: Out = []
  if (chunk.usage) s.usage = toResponsesUsage(chunk.usage)
  for (const choice of chunk.choices) {
    const d = choice.delta
    if (typeof d.reasoning === 'string' && d.reasoning !== '') writeReasoning(s, out, d.reasoning)
    // Details that come with the answer (a signature on its text or a tool call) do not split it:
    // they join the open reasoning item, or one more reasoning item at the end.
    for (const detail of d.reasoning_details ?? [])
      mergeDetail(s.reasoning?.details ?? s.looseDetails, detail)
    if (typeof d.content === 'string' && d.content !== '') writePart(s, out, 'output_text', d.content)
    if (typeof d.refusal === 'string' && d.refusal !== '') writePart(s, out, 'refusal', d.refusal)
    for (const t of d.tool_calls ?? []) writeCall(s, out, t)
    if (choice.finish_reason) s.finish = choice.finish_reason
  }
  return out
}

function startResponse(s: ResponsesStreamState): Out {
  const out: Out = []
  const response = responseObject(s.meta, {
    status: 'in_progress',
    incomplete_details: null,
    output: [],
    usage: null,
  })
  emit(s, out, { type: 'response.created', response })
  emit(s, out, { type: 'response.in_progress', response: clone(response) })
  return out
}

/** The function calls' arguments are whole at the end: each is done then. */
function closeCalls(s: ResponsesStreamState, out: Out): void {
  for (const { index, item } of s.calls.values()) {
    item.status = 'completed'
    emit(s, out, {
      type: 'response.function_call_arguments.done',
      item_id: item.id,
      output_index: index,
      arguments: item.arguments,
    })
    emit(s, out, { type: 'response.output_item.done', output_index: index, item: clone(item) })
  }
  s.calls.clear()
}

/** The details that came with no reasoning open, as one more reasoning item. */
function writeLooseDetails(s: ResponsesStreamState, out: Out): void {
  if (s.looseDetails.size === 0) return
  const index = s.output.length
  const item = reasoningItem(s.meta, index, '', [...s.looseDetails.values()])
  if (!item) return
  s.output.push(item)
  emit(s, out, {
    type: 'response.output_item.added',
    output_index: index,
    item: { ...clone(item), summary: [] },
  })
  emit(s, out, { type: 'response.output_item.done', output_index: index, item: clone(item) })
}

function finishResponse(s: ResponsesStreamState): Out {
  const out: Out = []
  const { status, incomplete_details } = statusOf(s.finish)
  closeReasoning(s, out)
  closeMessage(s, out, status === 'completed' ? 'completed' : 'incomplete')
  closeCalls(s, out)
  writeLooseDetails(s, out)
  const response = responseObject(s.meta, {
    status,
    incomplete_details,
    output: clone(s.output),
    usage: s.usage,
  })
  emit(s, out, { type: status === 'completed' ? 'response.completed' : 'response.incomplete', response })
  return out
}

function failResponse(
  s: ResponsesStreamState,
  error: { code: string; message: string; param: string | null },
) {
  const out: Out = []
  emit(s, out, { type: 'error', code: error.code, message: error.message, param: error.param })
  return out
}

export function createResponsesStreamTranslator(meta: ResponseMeta): ResponsesStreamTranslator {
  const state: ResponsesStreamState = {
    meta,
    seq: 0,
    output: [],
    reasoning: undefined,
    message: undefined,
    calls: new Map(),
    finish: null,
    usage: null,
    looseDetails: new Map(),
  }
  return {
    state,
    start: () => startResponse(state),
    push: (chunk) => pushChunk(state, chunk),
    finish: () => finishResponse(state),
    fail: (error) => failResponse(state, error),
  }
}

/** Streamed reasoning details come in pieces (text, then its signature): merged by index and type. */
function mergeDetail(into: Map<string, ReasoningDetail>, d: ReasoningDetail): void {
  const key = `${d.index ?? 0}:${d.type}`
  const seen = into.get(key)
  if (!seen) {
    into.set(key, { ...d })
    return
  }
  if (typeof d.text === 'string') seen.text = (seen.text ?? '') + d.text
  for (const [k, v] of Object.entries(d)) if (k !== 'text' && v !== undefined) seen[k] = v
}

export interface WriteResponsesSseOptions {
  /** The client's signal: once it fired, nothing more is written. */
  signal: AbortSignal
  requestId: string
  log: Logger
  /** Runs with the finished response before its last event is sent (to store it first). */
  onFinal?: (response: ResponseObject) => Promise<void>
}

export function sseEvent(e: ResponsesEvent): string {
  return `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`
}

/**
 * The relayed chat chunk batches as Responses SSE text, a batch at a time. The model named in the
 * events is the one that answered (the first chunk's). A failure after the stream started is one
 * `error` event in place of the final one, never a silent end.
 */
export async function* writeResponsesSse(
  batches: AsyncIterable<ChatChunk[]>,
  meta: ResponseMeta,
  o: WriteResponsesSseOptions,
): AsyncGenerator<string> {
  let t: ResponsesStreamTranslator | undefined
  const frame = (events: ResponsesEvent[]): string => events.map(sseEvent).join('')
  /** The translator, created with the first batch (whose model answered); its opening events. */
  const begin = (model: string): { t: ResponsesStreamTranslator; text: string } => {
    const created = createResponsesStreamTranslator({ ...meta, model })
    return { t: created, text: frame(created.start()) }
  }
  let first = true
  try {
    for await (const batch of batches) {
      let text = ''
      if (!t) ({ t, text } = begin(batch[0]?.model ?? meta.model))
      for (const chunk of batch) text += frame(t.push(chunk))
      if (text !== '') yield text
      // As writeSse: one turn of the event loop after the first batch puts it on the wire at once.
      if (first) {
        first = false
        await new Promise((resolve) => setImmediate(resolve))
      }
    }
    let text = ''
    if (!t) ({ t, text } = begin(meta.model))
    const last = t.finish()
    await o.onFinal?.(last.at(-1)!.response as ResponseObject)
    yield text + frame(last)
  } catch (err) {
    if (o.signal.aborted) return
    const e = toGatewayError(err)
    o.log.warn({ err, status: e.status, code: e.code }, 'stream failed after it started')
    let text = ''
    if (!t) ({ t, text } = begin(meta.model))
    const body = toErrorBody(e, o.requestId)
    yield (
      text + frame(t.fail({ code: body.error.code, message: body.error.message, param: body.error.param }))
    )
  }
}

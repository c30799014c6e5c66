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
// events as `event: <type>\ndata: <json>\n\n`.

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

export interface ResponsesStreamTranslator {
  /** response.created and response.in_progress. */
  start(): ResponsesEvent[]
  /** The events for one chat chunk. */
  push(chunk: ChatChunk): ResponsesEvent[]
  /** Closes what is open, then response.completed or response.incomplete with the whole response. */
  finish(): ResponsesEvent[]
  /** An `error` event: the stream failed after it started. */
  fail(error: { code: string; message: string; param: string | null }): ResponsesEvent[]
}

export function createResponsesStreamTranslator(meta: ResponseMeta): ResponsesStreamTranslator {
  let seq = 0
  const output: OutputItem[] = []
  let reasoning: OpenReasoning | undefined
  let message: OpenMessage | undefined
  /** Function calls by the chunk's tool call index; open until the end. */
  const calls = new Map<number, { index: number; item: FunctionCallItem }>()
  let finish: string | null = null
  let usage: ResponsesUsage | null = null
  const looseDetails = new Map<string, ReasoningDetail>()

  const emit = (out: ResponsesEvent[], e: Draft): void => {
    out.push({ ...e, sequence_number: seq++ } as ResponsesEvent)
  }
  const clone = <T>(v: T): T => structuredClone(v)

  const closeReasoning = (out: ResponsesEvent[]): void => {
    const r = reasoning
    if (!r) return
    reasoning = undefined
    const details = [...r.details.values()]
    const item = reasoningItem(meta, r.index, r.text, details.length > 0 ? details : undefined) ?? {
      type: 'reasoning' as const,
      id: r.id,
      summary: [],
    }
    item.id = r.id
    if (r.partOpen) {
      const base = { item_id: r.id, output_index: r.index, summary_index: 0 }
      emit(out, { type: 'response.reasoning_summary_text.done', ...base, text: r.text })
      emit(out, {
        type: 'response.reasoning_summary_part.done',
        ...base,
        part: { type: 'summary_text', text: r.text },
      })
    }
    output[r.index] = item
    emit(out, { type: 'response.output_item.done', output_index: r.index, item: clone(item) })
  }

  const closePart = (out: ResponsesEvent[], m: OpenMessage): void => {
    const p = m.part
    if (!p) return
    m.part = undefined
    const base = { item_id: m.item.id, output_index: m.index, content_index: p.index }
    const part =
      p.type === 'output_text'
        ? { type: 'output_text' as const, text: p.text, annotations: [], logprobs: [] }
        : { type: 'refusal' as const, refusal: p.text }
    if (p.type === 'output_text')
      emit(out, { type: 'response.output_text.done', ...base, text: p.text, logprobs: [] })
    else emit(out, { type: 'response.refusal.done', ...base, refusal: p.text })
    m.item.content.push(part)
    emit(out, { type: 'response.content_part.done', ...base, part: clone(part) })
  }

  const closeMessage = (out: ResponsesEvent[], status: MessageItem['status']): void => {
    const m = message
    if (!m) return
    message = undefined
    closePart(out, m)
    m.item.status = status
    output[m.index] = m.item
    emit(out, { type: 'response.output_item.done', output_index: m.index, item: clone(m.item) })
  }

  const openReasoning = (out: ResponsesEvent[]): OpenReasoning => {
    if (reasoning) return reasoning
    closeMessage(out, 'completed')
    const index = output.length
    const id = itemId(meta, 'rs', index)
    reasoning = { index, id, text: '', partOpen: false, details: new Map() }
    output.push({ type: 'reasoning', id, summary: [] })
    emit(out, {
      type: 'response.output_item.added',
      output_index: index,
      item: { type: 'reasoning', id, summary: [] },
    })
    return reasoning
  }

  const writePart = (out: ResponsesEvent[], type: 'output_text' | 'refusal', delta: string): void => {
    closeReasoning(out)
    if (!message) {
      const index = output.length
      const item: MessageItem = {
        type: 'message',
        id: itemId(meta, 'msg', index),
        status: 'in_progress',
        role: 'assistant',
        content: [],
      }
      message = { index, item, part: undefined }
      output.push(item)
      emit(out, { type: 'response.output_item.added', output_index: index, item: clone(item) })
    }
    const m = message
    if (m.part && m.part.type !== type) closePart(out, m)
    if (!m.part) {
      m.part = { type, index: m.item.content.length, text: '' }
      const part =
        type === 'output_text' ? { type, text: '', annotations: [], logprobs: [] } : { type, refusal: '' }
      emit(out, {
        type: 'response.content_part.added',
        item_id: m.item.id,
        output_index: m.index,
        content_index: m.part.index,
        part,
      })
    }
    m.part.text += delta
    const base = { item_id: m.item.id, output_index: m.index, content_index: m.part.index, delta }
    if (type === 'output_text') emit(out, { type: 'response.output_text.delta', ...base, logprobs: [] })
    else emit(out, { type: 'response.refusal.delta', ...base })
  }

  return {
    start() {
      const out: ResponsesEvent[] = []
      const response = responseObject(meta, {
        status: 'in_progress',
        incomplete_details: null,
        output: [],
        usage: null,
      })
      emit(out, { type: 'response.created', response })
      emit(out, { type: 'response.in_progress', response: clone(response) })
      return out
    },

    push(chunk) {
      const out: ResponsesEvent[] = []
      if (chunk.usage) usage = toResponsesUsage(chunk.usage)
      for (const choice of chunk.choices) {
        const d = choice.delta
        if (typeof d.reasoning === 'string' && d.reasoning !== '') {
          const r = openReasoning(out)
          const base = { item_id: r.id, output_index: r.index, summary_index: 0 }
          if (!r.partOpen) {
            r.partOpen = true
            emit(out, {
              type: 'response.reasoning_summary_part.added',
              ...base,
              part: { type: 'summary_text', text: '' },
            })
          }
          r.text += d.reasoning
          emit(out, { type: 'response.reasoning_summary_text.delta', ...base, delta: d.reasoning })
        }
        // Details that come with the answer (a signature on its text or a tool call) do not split it:
        // they join the open reasoning item, or one more reasoning item at the end.
        for (const detail of d.reasoning_details ?? [])
          mergeDetail(reasoning?.details ?? looseDetails, detail)
        if (typeof d.content === 'string' && d.content !== '') writePart(out, 'output_text', d.content)
        if (typeof d.refusal === 'string' && d.refusal !== '') writePart(out, 'refusal', d.refusal)
        for (const t of d.tool_calls ?? []) {
          let call = calls.get(t.index)
          if (!call) {
            closeReasoning(out)
            closeMessage(out, 'completed')
            const index = output.length
            const item: FunctionCallItem = {
              type: 'function_call',
              id: itemId(meta, 'fc', index),
              call_id: t.id ?? `call_${index}`,
              name: t.function?.name ?? '',
              arguments: '',
              status: 'in_progress',
            }
            call = { index, item }
            calls.set(t.index, call)
            output.push(item)
            emit(out, { type: 'response.output_item.added', output_index: index, item: clone(item) })
          }
          const args = t.function?.arguments
          if (typeof args === 'string' && args !== '') {
            call.item.arguments += args
            emit(out, {
              type: 'response.function_call_arguments.delta',
              item_id: call.item.id,
              output_index: call.index,
              delta: args,
            })
          }
        }
        if (choice.finish_reason) finish = choice.finish_reason
      }
      return out
    },

    finish() {
      const out: ResponsesEvent[] = []
      const { status, incomplete_details } = statusOf(finish)
      closeReasoning(out)
      closeMessage(out, status === 'completed' ? 'completed' : 'incomplete')
      for (const { index, item } of calls.values()) {
        item.status = 'completed'
        emit(out, {
          type: 'response.function_call_arguments.done',
          item_id: item.id,
          output_index: index,
          arguments: item.arguments,
        })
        emit(out, { type: 'response.output_item.done', output_index: index, item: clone(item) })
      }
      calls.clear()
      if (looseDetails.size > 0) {
        const index = output.length
        const item = reasoningItem(meta, index, '', [...looseDetails.values()])
        if (item) {
          output.push(item)
          emit(out, {
            type: 'response.output_item.added',
            output_index: index,
            item: { ...clone(item), summary: [] },
          })
          emit(out, { type: 'response.output_item.done', output_index: index, item: clone(item) })
        }
      }
      const response = responseObject(meta, { status, incomplete_details, output: clone(output), usage })
      emit(out, { type: status === 'completed' ? 'response.completed' : 'response.incomplete', response })
      return out
    },

    fail(error) {
      const out: ResponsesEvent[] = []
      emit(out, { type: 'error', code: error.code, message: error.message, param: error.param })
      return out
    },
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

import type { EmbeddingsRequest } from '../types.ts'
import type { ChunkMeta } from '../shared/stream.ts'
import { GEMINI_REASONING_FORMAT, toolCallId } from './request.ts'
import type { GeminiEmbedResponse, GeminiResponse, GeminiResponsePart, GeminiUsage } from './wire.ts'
import type {
  ChatCompletion,
  EmbeddingsResponse,
  FinishReason,
  ReasoningDetail,
  ToolCall,
  Usage,
} from '../../domain/chat.ts'

// Gemini GenerateContentResponse → OpenAI shapes. Pure. A blocking answer and a stream go through the
// same part reader, so both give the same content, tool call ids and reasoning_details.

export interface TranslateOptions {
  /** `reasoning.exclude`: no thought text in the answer (signatures, being opaque, stay). */
  excludeReasoning?: boolean
}

const filtered = new Set([
  'SAFETY',
  'RECITATION',
  'BLOCKLIST',
  'PROHIBITED_CONTENT',
  'SPII',
  'IMAGE_SAFETY',
  'IMAGE_PROHIBITED_CONTENT',
  'IMAGE_RECITATION',
])

/**
 * https://ai.google.dev/api/generate-content#FinishReason. Gemini ends a function-calling turn with
 * STOP; OpenAI clients expect `tool_calls` there.
 */
export function mapFinishReason(r: string | undefined, hasToolCalls: boolean): FinishReason {
  if (r === 'MAX_TOKENS') return 'length'
  if (r !== undefined && filtered.has(r)) return 'content_filter'
  return hasToolCalls ? 'tool_calls' : 'stop'
}

/** promptTokenCount includes cached tokens; thoughts are counted apart from candidates. */
export function toUsage(u: GeminiUsage | undefined): Usage {
  const prompt = (u?.promptTokenCount ?? 0) + (u?.toolUsePromptTokenCount ?? 0)
  const thoughts = u?.thoughtsTokenCount ?? 0
  const completion = (u?.candidatesTokenCount ?? 0) + thoughts
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: u?.cachedContentTokenCount ?? 0 },
    completion_tokens_details: { reasoning_tokens: thoughts },
  }
}

export type PartEvent =
  | { type: 'content'; text: string }
  | { type: 'reasoning'; text: string }
  | { type: 'tool_call'; index: number; call: ToolCall }
  | { type: 'detail'; detail: ReasoningDetail }

export interface PartState {
  toolCalls: number
  details: number
  /** Thought summary text not yet closed by a non-thought part. */
  thought: string
}

export const newPartState = (): PartState => ({ toolCalls: 0, details: 0, thought: '' })

/**
 * Reads response parts in order. Thought parts (`thought: true`) are reasoning; a summary becomes one
 * `reasoning.text` detail when the answer proper starts. Every thoughtSignature becomes a
 * `reasoning.encrypted` detail, carrying the tool call id when it came on a function call.
 */
export function readParts(
  parts: GeminiResponsePart[],
  state: PartState,
  options: TranslateOptions,
): PartEvent[] {
  const out: PartEvent[] = []
  for (const part of parts) {
    if (part.thought === true) {
      const text = part.text ?? ''
      if (text !== '' && !options.excludeReasoning) {
        state.thought += text
        out.push({ type: 'reasoning', text })
      }
      if (part.thoughtSignature) out.push(signatureDetail(part.thoughtSignature, undefined, state))
      continue
    }
    out.push(...flushThought(state))
    if (part.functionCall) {
      const index = state.toolCalls++
      // A call without a name is a piece of streamed arguments, which stream.ts assembles first.
      const name = part.functionCall.name ?? ''
      const id = part.functionCall.id || toolCallId(index, name)
      out.push({
        type: 'tool_call',
        index,
        call: {
          id,
          type: 'function',
          function: { name, arguments: JSON.stringify(part.functionCall.args ?? {}) },
        },
      })
      if (part.thoughtSignature) out.push(signatureDetail(part.thoughtSignature, id, state))
      continue
    }
    if (part.text !== undefined && part.text !== '') out.push({ type: 'content', text: part.text })
    if (part.thoughtSignature) out.push(signatureDetail(part.thoughtSignature, undefined, state))
  }
  return out
}

/** Closes a pending thought summary into its `reasoning.text` detail. */
export function flushThought(state: PartState): PartEvent[] {
  if (state.thought === '') return []
  const detail: ReasoningDetail = {
    type: 'reasoning.text',
    text: state.thought,
    format: GEMINI_REASONING_FORMAT,
    index: state.details++,
  }
  state.thought = ''
  return [{ type: 'detail', detail }]
}

/** A thoughtSignature as its `reasoning.encrypted` detail (with the id of the call it came on). */
export function signatureDetail(data: string, id: string | undefined, state: PartState): PartEvent {
  const detail: ReasoningDetail = {
    type: 'reasoning.encrypted',
    data,
    format: GEMINI_REASONING_FORMAT,
    index: state.details++,
  }
  if (id !== undefined) detail.id = id
  return { type: 'detail', detail }
}

export function fromGeminiResponse(
  resp: GeminiResponse,
  meta: ChunkMeta,
  options: TranslateOptions = {},
): ChatCompletion {
  const candidate = resp.candidates?.[0]
  const state = newPartState()
  const events = [...readParts(candidate?.content?.parts ?? [], state, options), ...flushThought(state)]
  let content = ''
  let reasoning = ''
  const toolCalls: ToolCall[] = []
  const details: ReasoningDetail[] = []
  for (const e of events) {
    if (e.type === 'content') content += e.text
    else if (e.type === 'reasoning') reasoning += e.text
    else if (e.type === 'tool_call') toolCalls.push(e.call)
    else details.push(e.detail)
  }
  const finish: FinishReason =
    candidate === undefined && resp.promptFeedback?.blockReason
      ? 'content_filter'
      : mapFinishReason(candidate?.finishReason, toolCalls.length > 0)
  const message: ChatCompletion['choices'][number]['message'] = {
    role: 'assistant',
    content: content === '' && toolCalls.length > 0 ? null : content,
    refusal: null,
  }
  if (toolCalls.length > 0) message.tool_calls = toolCalls
  if (reasoning !== '') message.reasoning = reasoning
  if (details.length > 0) message.reasoning_details = details
  return {
    id: resp.responseId ?? meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: resp.modelVersion ?? meta.model,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finish }],
    usage: toUsage(resp.usageMetadata),
  }
}

// ---------------------------------------------------------------------------------------------
// Embeddings

/**
 * batchEmbedContents reports no token counts: usage is Junction's estimate (about four characters a
 * token). `encoding_format: base64` is little-endian float32, as OpenAI sends it.
 */
export function fromGeminiEmbeddings(
  resp: GeminiEmbedResponse,
  req: EmbeddingsRequest,
  model: string,
): EmbeddingsResponse {
  // Only texts reach Gemini (toGeminiEmbedRequest refuses token arrays).
  const inputs: unknown[] = typeof req.input === 'string' ? [req.input] : req.input
  const tokens = inputs.reduce<number>((n, x) => n + (typeof x === 'string' ? Math.ceil(x.length / 4) : 0), 0)
  return {
    object: 'list',
    data: resp.embeddings.map((e, index) => ({
      object: 'embedding' as const,
      index,
      embedding:
        req.encoding_format === 'base64'
          ? Buffer.from(new Float32Array(e.values).buffer).toString('base64')
          : e.values,
    })),
    model,
    usage: { prompt_tokens: tokens, total_tokens: tokens },
  }
}

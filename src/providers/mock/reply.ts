import { createHash, type Hash } from 'node:crypto'
import { GatewayError } from '../../errors.ts'
import { finishNow, type Sliced } from '../../turns.ts'
import { allowedToolName } from '../shared/request.ts'
import { sampleFromSchema } from './schema-instance.ts'
import type { ChatMessage, ChatRequest, EmbeddingsRequest, FunctionTool } from '../types.ts'
import type {
  ChatChunk,
  ChatCompletion,
  EmbeddingsResponse,
  FinishReason,
  ToolCall,
  Usage,
} from '../../domain/chat.ts'

// The built-in `mock` provider: answers computed from the request alone, so the gateway runs (and
// tests run) with no keys and no network. Same request → byte-identical answer, except `created`.

/** The fixed tail of every text reply; its common words ("fox", "the", "and") make handy stop strings. */
export const MOCK_REPLY_TAIL = 'The quick brown fox jumps over the lazy dog, and that is all.'
export const MOCK_SYSTEM_FINGERPRINT = 'junction-mock'
export const DEFAULT_EMBEDDING_DIMENSIONS = 256
export const MAX_EMBEDDING_DIMENSIONS = 4096
/**
 * The most numbers (inputs × dimensions) one embeddings answer holds: 1,048,576 floats are about
 * 20 MB of JSON. 2,048 inputs × 4,096 dimensions, 8 M floats (≈180 MB), stalled every other client.
 */
export const MAX_EMBEDDING_NUMBERS = 1_048_576

const QUOTED_CHARS = 60
const TOKENS_PER_CHUNK = 2
const ARGUMENT_PIECES = 3

// A token is a run of letters, marks, digits or `_`, or any single other non-space character.
const TOKEN = /[\p{L}\p{M}\p{N}_]+|[^\p{L}\p{M}\p{N}_\s]/gu

/**
 * The mock's token count: words (runs of letters, digits, `_`) plus each punctuation or symbol
 * character on its own; whitespace counts nothing. `countTokens('Hi, there!') === 4`.
 * Used alike for prompts, completions and embedding inputs.
 */
export function countTokens(text: string): number {
  return text.match(TOKEN)?.length ?? 0
}

/** Text counted between two checkpoints by {@link countTokensSteps}. */
export const COUNT_WINDOW = 64 * 1024

const WORD_CHAR = /[\p{L}\p{M}\p{N}_]/u

function isWordAt(text: string, i: number): boolean {
  const cp = text.codePointAt(i)
  return cp !== undefined && WORD_CHAR.test(String.fromCodePoint(cp))
}

function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff
}

/**
 * {@link countTokens}, a window of `window` characters at a time with a checkpoint after each: a regular
 * expression over 9.9 MB of text held the event loop for most of a second. A word cut in two by a
 * window's end is counted once; a surrogate pair is never cut.
 */
export function* countTokensSteps(text: string, window = COUNT_WINDOW): Sliced<number> {
  let total = 0
  let start = 0
  while (text.length - start > window) {
    let end = start + window
    if (isLowSurrogate(text.charCodeAt(end))) end++
    total += countTokens(text.slice(start, end))
    const before = isLowSurrogate(text.charCodeAt(end - 1)) ? end - 2 : end - 1
    if (isWordAt(text, before) && isWordAt(text, end)) total--
    start = end
    yield
  }
  return total + countTokens(text.slice(start))
}

/** End offsets (exclusive) of each token of `text`, in order. */
function tokenEnds(text: string): number[] {
  return Array.from(text.matchAll(TOKEN), (m) => m.index + m[0].length)
}

/** Characters of a value's JSON hashed between two checkpoints. */
const HASH_WINDOW = 1024 * 1024

/** Adds `text` to the hash a window at a time (SHA-256 of 10 MB is tens of milliseconds). */
function* hashSteps(hash: Hash, text: string): Sliced<void> {
  for (let i = 0; i < text.length; i += HASH_WINDOW) {
    hash.update(text.slice(i, i + HASH_WINDOW))
    yield
  }
  // A separator, so that ["ab","c"] and ["a","bc"] differ.
  hash.update('\u0000')
}

/** Strings longer than this are hashed apart from the JSON of the value holding them. */
const LONG_STRING = 4096

/**
 * Adds a message or tool to the hash without serializing a long string of it in one go (JSON.stringify
 * of a 9.9 MB message was 35 ms): long strings are left out of its JSON, each as a numbered marker,
 * and hashed after it, a window at a time.
 */
function* hashValueSteps(hash: Hash, value: unknown): Sliced<void> {
  const long: string[] = []
  const json = JSON.stringify(value, (_key, v: unknown) => {
    if (typeof v !== 'string' || v.length <= LONG_STRING) return v
    long.push(v)
    return { longString: long.length }
  })
  yield* hashSteps(hash, json)
  for (const text of long) yield* hashSteps(hash, text)
}

function messageText(message: ChatMessage): string {
  const { content } = message
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) return ''
  return content
    .flatMap((part) => (part.type === 'text' && typeof part.text === 'string' ? [part.text] : []))
    .join(' ')
}

/** Prompt tokens: the text of every message plus the name and arguments of each tool call it carries. */
function* countPromptTokens(messages: ChatMessage[]): Sliced<number> {
  let total = 0
  for (const message of messages) {
    total += yield* countTokensSteps(messageText(message))
    for (const call of message.role === 'assistant' ? (message.tool_calls ?? []) : []) {
      total += countTokens(call.function.name) + (yield* countTokensSteps(call.function.arguments))
    }
    // 10 000 messages of 1 KB are 10 MB to count too.
    yield
  }
  return total
}

// Whitespace runs, or one other code point: the quote needs only its first QUOTED_CHARS of these.
const QUOTE_PIECE = /\s+|[^\s]/gu

/**
 * The first QUOTED_CHARS code points of the last user message with whitespace runs made one space and
 * the ends trimmed: read from the start, never the whole message.
 */
function defaultReplyText(messages: ChatMessage[]): string {
  const lastUser = messages.findLast((m) => m.role === 'user')
  const text = lastUser === undefined ? '' : messageText(lastUser)
  let quoted = ''
  let count = 0
  let space = false
  QUOTE_PIECE.lastIndex = 0
  for (let m = QUOTE_PIECE.exec(text); m !== null && count < QUOTED_CHARS; m = QUOTE_PIECE.exec(text)) {
    if (/\s/u.test(m[0])) {
      space = count > 0
      continue
    }
    if (space) {
      quoted += ' '
      space = false
      if (++count === QUOTED_CHARS) break
    }
    quoted += m[0]
    count++
  }
  return `Mock reply to "${quoted}": ${MOCK_REPLY_TAIL}`
}

function stopStrings(stop: ChatRequest['stop']): string[] {
  if (stop === undefined || stop === null) return []
  return (typeof stop === 'string' ? [stop] : stop).filter((s) => s !== '')
}

function maxTokens(req: ChatRequest): number | undefined {
  return req.max_completion_tokens ?? req.max_tokens ?? undefined
}

/**
 * Cut at the earliest stop string, then at the token limit; whichever bites first sets the finish
 * reason. `stop` is the stop string that cut the text (reported as the choice's `stop_reason`, as
 * vLLM does), undefined when none did or the token limit cut it shorter.
 */
function limitText(
  text: string,
  req: ChatRequest,
): { content: string; finish: FinishReason; stop: string | undefined } {
  let content = text
  let stop: string | undefined
  for (const s of stopStrings(req.stop)) {
    const at = content.indexOf(s)
    if (at >= 0) {
      content = content.slice(0, at)
      stop = s
    }
  }
  let finish: FinishReason = 'stop'
  const limit = maxTokens(req)
  if (limit !== undefined) {
    const ends = tokenEnds(content)
    if (ends.length > limit) {
      content = limit <= 0 ? '' : content.slice(0, ends[limit - 1])
      finish = 'length'
      stop = undefined
    }
  }
  return { content, finish, stop }
}

function functionTools(req: ChatRequest): FunctionTool[] {
  return (req.tools ?? []).filter((t) => t.type === 'function')
}

/** The tool the request forces a call to, or undefined when the model may answer with text. */
function forcedTool(req: ChatRequest): FunctionTool | undefined {
  const tools = functionTools(req)
  const choice = req.tool_choice
  if (choice === undefined || choice === 'none' || choice === 'auto') return undefined
  if (choice === 'required') return tools[0]
  if (choice.type === 'function') {
    const tool = tools.find((t) => t.function.name === choice.function.name)
    if (tool === undefined) {
      throw new GatewayError(
        'invalid_value',
        `tool_choice names function '${choice.function.name}', which is not in tools`,
        { param: 'tool_choice' },
      )
    }
    return tool
  }
  if (choice.type === 'allowed_tools' && choice.allowed_tools.mode === 'required') {
    const allowed = new Set(choice.allowed_tools.tools.flatMap(allowedToolName))
    return tools.find((t) => allowed.has(t.function.name)) ?? tools[0]
  }
  // Custom tools are not mocked: a named custom choice gets a text answer.
  return undefined
}

/**
 * With tool_choice auto (or absent), the tool the conversation's last message names when that
 * message is the user's: "what is the weather? use get_weather". After a tool result (the last
 * message is the tool's) the mock answers with text, so a client's tool loop ends.
 */
function namedTool(req: ChatRequest): FunctionTool | undefined {
  const choice = req.tool_choice
  if (
    choice === 'none' ||
    choice === 'required' ||
    (typeof choice === 'object' && choice.type !== 'allowed_tools')
  ) {
    return undefined
  }
  const last = req.messages.at(-1)
  if (last?.role !== 'user') return undefined
  const allowed =
    typeof choice === 'object' && choice.type === 'allowed_tools'
      ? new Set(choice.allowed_tools.tools.flatMap(allowedToolName))
      : undefined
  const text = messageText(last)
  let first: { tool: FunctionTool; at: number } | undefined
  for (const tool of functionTools(req)) {
    if (allowed && !allowed.has(tool.function.name)) continue
    const at = indexOfWord(text, tool.function.name)
    if (at >= 0 && (first === undefined || at < first.at)) first = { tool, at }
  }
  return first?.tool
}

/** Where `name` first occurs in `text` as a whole word (tool names are [A-Za-z0-9_-]), or -1. */
function indexOfWord(text: string, name: string): number {
  const escaped = name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const match = new RegExp(`(?<![A-Za-z0-9_-])${escaped}(?![A-Za-z0-9_-])`).exec(text)
  return match?.index ?? -1
}

/**
 * The text of a reply the request asks to be JSON: `json_object` → an object holding the usual reply,
 * `json_schema` → a minimal instance of its schema. Undefined for text replies.
 */
function jsonReplyText(req: ChatRequest): string | undefined {
  const format = req.response_format
  if (format?.type === 'json_object') return JSON.stringify({ reply: defaultReplyText(req.messages) })
  if (format?.type === 'json_schema') {
    return JSON.stringify(sampleFromSchema(format.json_schema.schema ?? { type: 'object' }) ?? null)
  }
  return undefined
}

/** What a mock answer says, blocking or streamed; computed once by {@link mockReply}. */
export interface MockReply {
  id: string
  content: string | null
  toolCall: ToolCall | undefined
  finish: FinishReason
  /** The stop string that ended the text, if one did. */
  stop?: string
  usage: Usage
}

/**
 * The answer to `req`, as sliced work: hashing and counting a 10 MB prompt yield at checkpoints (the
 * adapter runs it in turns). Throws GatewayError 400 (param `tool_choice`) when a named function
 * choice names a function that is not in `tools`.
 */
export function* mockReply(req: ChatRequest, model: string): Sliced<MockReply> {
  // Hash only what shapes the answer, so the blocking and the streamed request get the same id.
  const hash = createHash('sha256')
  yield* hashSteps(
    hash,
    JSON.stringify([model, req.tool_choice, req.stop, maxTokens(req), req.response_format]),
  )
  for (const value of [...req.messages, ...(req.tools ?? [])]) yield* hashValueSteps(hash, value)
  const digest = hash.digest('hex')
  const id = `mockcmpl-${digest.slice(0, 24)}`
  const promptTokens = yield* countPromptTokens(req.messages)
  const tool = forcedTool(req) ?? namedTool(req)
  if (tool !== undefined) {
    const args = JSON.stringify(sampleFromSchema(tool.function.parameters ?? { type: 'object' }) ?? {})
    const toolCall: ToolCall = {
      id: `call_${createHash('sha256').update(`${digest}\u0000${tool.function.name}`).digest('hex').slice(0, 24)}`,
      type: 'function',
      function: { name: tool.function.name, arguments: args },
    }
    const completionTokens = countTokens(tool.function.name) + (yield* countTokensSteps(args))
    return { id, content: null, toolCall, finish: 'tool_calls', usage: usage(promptTokens, completionTokens) }
  }
  const { content, finish, stop } = limitText(jsonReplyText(req) ?? defaultReplyText(req.messages), req)
  return { id, content, toolCall: undefined, finish, stop, usage: usage(promptTokens, countTokens(content)) }
}

function usage(prompt: number, completion: number): Usage {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  }
}

/** vLLM's `stop_reason` on the choice: the stop string that ended the answer (absent otherwise). */
function stopReason(reply: MockReply): { stop_reason?: string } {
  return reply.stop === undefined ? {} : { stop_reason: reply.stop }
}

/** `now` is epoch milliseconds; `created` is whole seconds. */
function toCreated(now: number): number {
  return Math.floor(now / 1000)
}

/**
 * The blocking answer; `reply` is computed at once when not given. Throws GatewayError 400 (param
 * `tool_choice`) when a named function choice names a function that is not in `tools`.
 */
export function mockChatCompletion(
  req: ChatRequest,
  model: string,
  now: number,
  reply: MockReply = finishNow(mockReply(req, model)),
): ChatCompletion {
  return {
    id: reply.id,
    object: 'chat.completion',
    created: toCreated(now),
    model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: reply.content,
          refusal: null,
          annotations: [],
          ...(reply.toolCall === undefined ? {} : { tool_calls: [reply.toolCall] }),
        },
        logprobs: null,
        finish_reason: reply.finish,
        ...stopReason(reply),
      },
    ],
    usage: reply.usage,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
  }
}

/** Splits text after every TOKENS_PER_CHUNK tokens; the pieces concatenate back to `text`. */
function splitText(text: string): string[] {
  const ends = tokenEnds(text)
  const pieces: string[] = []
  let start = 0
  for (let i = TOKENS_PER_CHUNK - 1; i < ends.length - 1; i += TOKENS_PER_CHUNK) {
    const end = ends[i] as number
    pieces.push(text.slice(start, end))
    start = end
  }
  if (start < text.length) pieces.push(text.slice(start))
  return pieces
}

/** Splits a string into up to ARGUMENT_PIECES pieces, at least 2 when it has 2 characters or more. */
function splitArguments(args: string): string[] {
  const size = Math.max(1, Math.ceil(args.length / ARGUMENT_PIECES))
  const pieces: string[] = []
  for (let i = 0; i < args.length; i += size) pieces.push(args.slice(i, i + size))
  return pieces
}

/**
 * The same answer as `mockChatCompletion`, as OpenAI-style chunks: a role chunk, the content (or the
 * tool call) in several deltas, a finish chunk with an empty delta, then always a usage chunk with
 * `choices: []`. Text content deltas concatenate to the blocking content; for a tool call the role
 * chunk carries `content: null`, as OpenAI's does.
 */
export function mockChatChunks(
  req: ChatRequest,
  model: string,
  now: number,
  reply: MockReply = finishNow(mockReply(req, model)),
): ChatChunk[] {
  const created = toCreated(now)
  const chunk = (
    delta: ChatChunk['choices'][number]['delta'],
    finish: FinishReason | null = null,
  ): ChatChunk => ({
    id: reply.id,
    object: 'chat.completion.chunk',
    created,
    model,
    system_fingerprint: MOCK_SYSTEM_FINGERPRINT,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })
  const chunks: ChatChunk[] = []
  const { toolCall } = reply
  if (toolCall === undefined) {
    chunks.push(chunk({ role: 'assistant', content: '' }))
    for (const piece of splitText(reply.content ?? '')) chunks.push(chunk({ content: piece }))
  } else {
    chunks.push(chunk({ role: 'assistant', content: null }))
    chunks.push(
      chunk({
        tool_calls: [
          {
            index: 0,
            id: toolCall.id,
            type: 'function',
            function: { name: toolCall.function.name, arguments: '' },
          },
        ],
      }),
    )
    for (const piece of splitArguments(toolCall.function.arguments)) {
      chunks.push(chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }))
    }
  }
  const last = chunk({}, reply.finish)
  Object.assign(last.choices[0]!, stopReason(reply))
  chunks.push(last)
  chunks.push({ ...chunk({}), choices: [], usage: reply.usage })
  return chunks
}

/** Each input as text; a token array is the text of its values joined by spaces. */
function embeddingInputs(input: EmbeddingsRequest['input']): string[] {
  if (typeof input === 'string') return [input]
  if (input.length === 0) return []
  if (input.every((x) => typeof x === 'number')) return [input.join(' ')]
  return input.map((x) => (Array.isArray(x) ? x.join(' ') : String(x)))
}

function embeddingDimensions(dimensions: unknown): number {
  if (dimensions === undefined || dimensions === null) return DEFAULT_EMBEDDING_DIMENSIONS
  if (
    typeof dimensions !== 'number' ||
    !Number.isInteger(dimensions) ||
    dimensions < 1 ||
    dimensions > MAX_EMBEDDING_DIMENSIONS
  ) {
    throw new GatewayError(
      'invalid_value',
      `dimensions must be an integer from 1 to ${MAX_EMBEDDING_DIMENSIONS}`,
      { param: 'dimensions' },
    )
  }
  return dimensions
}

/** sfc32 seeded with the first 16 bytes of sha256(text): uniform floats in [0, 1). */
function seededRandom(text: string): () => number {
  const digest = createHash('sha256').update(text).digest()
  let a = digest.readUInt32LE(0)
  let b = digest.readUInt32LE(4)
  let c = digest.readUInt32LE(8)
  let d = digest.readUInt32LE(12)
  return () => {
    const t = (((a + b) | 0) + d) | 0
    d = (d + 1) | 0
    a = b ^ (b >>> 9)
    b = (c + (c << 3)) | 0
    c = (c << 21) | (c >>> 11)
    c = (c + t) | 0
    return (t >>> 0) / 4294967296
  }
}

/** A deterministic unit vector (L2 norm 1), already rounded to float32 so base64 round-trips exactly. */
export function mockVector(text: string, dimensions: number): number[] {
  const random = seededRandom(text)
  const raw = Array.from({ length: dimensions }, () => random() * 2 - 1)
  const norm = Math.hypot(...raw)
  // A zero vector has no direction; it cannot happen in practice, but keep the unit-length promise.
  if (norm === 0) return raw.map((_, i) => (i === 0 ? 1 : 0))
  return raw.map((x) => Math.fround(x / norm))
}

/** OpenAI's base64 format: the vector's little-endian float32 bytes. */
export function toBase64Floats(vector: number[]): string {
  const bytes = Buffer.alloc(vector.length * 4)
  vector.forEach((x, i) => bytes.writeFloatLE(x, i * 4))
  return bytes.toString('base64')
}

/**
 * One vector per input. Throws GatewayError 400 `invalid_value`, before computing any vector, unless
 * `dimensions` is an integer from 1 to MAX_EMBEDDING_DIMENSIONS and inputs × dimensions is at most
 * MAX_EMBEDDING_NUMBERS (param `dimensions`, or `input` when the client left dimensions out).
 */
export function mockEmbeddings(req: EmbeddingsRequest, model: string): EmbeddingsResponse {
  return finishNow(mockEmbeddingsSteps(req, model))
}

/** {@link mockEmbeddings} as sliced work: 2 048 inputs of 4.8 KB held the loop for a second at once. */
export function* mockEmbeddingsSteps(req: EmbeddingsRequest, model: string): Sliced<EmbeddingsResponse> {
  const dimensions = embeddingDimensions(req.dimensions)
  const inputs = embeddingInputs(req.input)
  if (inputs.length * dimensions > MAX_EMBEDDING_NUMBERS) {
    throw new GatewayError(
      'invalid_value',
      `${inputs.length} inputs × ${dimensions} dimensions is more than the ${MAX_EMBEDDING_NUMBERS} ` +
        'numbers one answer may hold; send fewer inputs or ask for fewer dimensions',
      { param: req.dimensions === undefined ? 'input' : 'dimensions' },
    )
  }
  let tokens = 0
  const data: EmbeddingsResponse['data'] = []
  for (const [index, text] of inputs.entries()) {
    tokens += yield* countTokensSteps(text)
    const vector = mockVector(text, dimensions)
    data.push({
      object: 'embedding',
      index,
      embedding: req.encoding_format === 'base64' ? toBase64Floats(vector) : vector,
    })
    yield
  }
  return { object: 'list', data, model, usage: { prompt_tokens: tokens, total_tokens: tokens } }
}

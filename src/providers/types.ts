import type { Dispatcher } from 'undici'
import type { Logger } from '../logger.ts'

// Junction's own shapes: the OpenAI chat-completions contract of interface.md. Adapters translate
// their upstream protocol to and from these; routes never see a provider's wire format.

export type Role = 'developer' | 'system' | 'user' | 'assistant' | 'tool'

export interface TextPart {
  type: 'text'
  text: string
}
export interface ImagePart {
  type: 'image_url'
  image_url: { url: string; detail?: string }
}
export interface FilePart {
  type: 'file'
  file: { file_id?: string; file_data?: string; filename?: string }
}
export type ContentPart = TextPart | ImagePart | FilePart | { type: string; [key: string]: unknown }

export interface ToolCall {
  id: string
  type: 'function' | string
  function: { name: string; arguments: string }
  [key: string]: unknown
}

export interface ReasoningDetail {
  type: string
  text?: string
  signature?: string
  format?: string
  index?: number
  [key: string]: unknown
}

export interface ChatMessage {
  role: Role
  content?: string | ContentPart[] | null
  name?: string
  tool_call_id?: string
  tool_calls?: ToolCall[]
  refusal?: string | null
  reasoning?: string
  reasoning_details?: ReasoningDetail[]
  [key: string]: unknown
}

export interface FunctionTool {
  type: 'function'
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean }
}
export type Tool = FunctionTool | { type: string; [key: string]: unknown }

export type ToolChoice =
  | 'none'
  | 'auto'
  | 'required'
  | { type: 'function'; function: { name: string } }
  | { type: 'custom'; custom: { name: string } }
  | { type: 'allowed_tools'; allowed_tools: { mode: 'auto' | 'required'; tools: Record<string, unknown>[] } }

export interface ReasoningOptions {
  enabled: boolean
  effort?: 'low' | 'medium' | 'high'
  max_tokens?: number
  exclude?: boolean
  usage?: { include: boolean }
}

/** A validated chat request. Unknown top-level fields are kept (forwarded to OpenAI-compatible upstreams). */
export interface ChatRequest {
  model: string
  messages: ChatMessage[]
  max_completion_tokens?: number | null
  max_tokens?: number | null
  temperature?: number
  top_p?: number
  n?: number
  frequency_penalty?: number
  presence_penalty?: number
  stop?: string | string[] | null
  logit_bias?: Record<string, number>
  logprobs?: boolean | null
  top_logprobs?: number
  tools?: Tool[]
  tool_choice?: ToolChoice
  parallel_tool_calls?: boolean
  reasoning_effort?: 'none' | 'minimal' | 'low' | 'medium' | 'high' | 'xhigh'
  verbosity?: 'low' | 'medium' | 'high'
  metadata?: Record<string, string>
  response_format?: { type: 'text' | 'json_object' | 'json_schema'; json_schema?: Record<string, unknown> }
  stream?: boolean | null
  stream_options?: { include_usage?: boolean; include_obfuscation?: boolean } | null
  reasoning?: ReasoningOptions
  provider?: Record<string, unknown>
  model_routing_config?: Record<string, unknown>
  [key: string]: unknown
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'function_call'

export interface Usage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details?: { cached_tokens?: number; audio_tokens?: number; [key: string]: unknown }
  completion_tokens_details?: {
    reasoning_tokens?: number
    audio_tokens?: number
    accepted_prediction_tokens?: number
    rejected_prediction_tokens?: number
    [key: string]: unknown
  }
  [key: string]: unknown
}

export interface ChatCompletion {
  id: string
  object: 'chat.completion'
  created: number
  model: string
  choices: {
    index: number
    message: {
      role: 'assistant'
      content: string | null
      refusal?: string | null
      annotations?: unknown[]
      tool_calls?: ToolCall[]
      reasoning?: string
      reasoning_details?: ReasoningDetail[]
      [key: string]: unknown
    }
    logprobs: unknown
    finish_reason: FinishReason | null
    [key: string]: unknown
  }[]
  usage?: Usage
  system_fingerprint?: string
  [key: string]: unknown
}

export interface ChunkToolCallDelta {
  index: number
  id?: string
  type?: 'function'
  function?: { name?: string; arguments?: string }
}

export interface ChatChunk {
  id: string
  object: 'chat.completion.chunk'
  created: number
  model: string
  choices: {
    index: number
    delta: {
      role?: 'assistant'
      content?: string | null
      refusal?: string | null
      tool_calls?: ChunkToolCallDelta[]
      reasoning?: string
      reasoning_details?: ReasoningDetail[]
      [key: string]: unknown
    }
    logprobs?: unknown
    finish_reason: FinishReason | null
    [key: string]: unknown
  }[]
  usage?: Usage | null
  system_fingerprint?: string
  [key: string]: unknown
}

export interface EmbeddingsRequest {
  model: string
  input: string | string[] | number[] | number[][]
  dimensions?: number
  encoding_format?: 'float' | 'base64'
  input_type?: string
  user?: string
  [key: string]: unknown
}

export interface EmbeddingsResponse {
  object: 'list'
  data: { object: 'embedding'; index: number; embedding: number[] | string }[]
  model: string
  usage: { prompt_tokens: number; total_tokens: number }
  [key: string]: unknown
}

export type ProviderKind = 'openai-compat' | 'anthropic' | 'gemini' | 'mock'

export interface UpstreamTimeouts {
  /** TCP + TLS connect. */
  connectMs: number
  /** Request sent → response headers. */
  firstByteMs: number
  /** Longest silence between two body chunks. */
  idleMs: number
  /** Request sent → body fully read, streams included: no upstream call lasts longer. */
  totalMs: number
}

/** A configured provider instance (e.g. `openai`, `groq`, `mock`). */
export interface UpstreamConfig {
  name: string
  kind: ProviderKind
  baseUrl: string
  /** Resolved secret; never logged. */
  apiKey?: string
  headers: Record<string, string>
  timeouts: UpstreamTimeouts
  /** Most (decompressed) bytes read from a blocking response body; a longer one is a 502. */
  maxResponseBytes: number
  /** Mock provider only: delay before answering. */
  latencyMs: number
}

export interface UpstreamCall {
  upstream: UpstreamConfig
  /** The model id the upstream knows (the slug's right-hand side, or its configured mapping). */
  upstreamModel: string
  signal: AbortSignal
  log: Logger
  /** The keep-alive pool for this upstream; absent for providers that do no HTTP. */
  dispatcher?: Dispatcher
  /** Called when the upstream's response starts (latency measurement). */
  onFirstByte?: () => void
}

export interface ProviderAdapter {
  chat(req: ChatRequest, call: UpstreamCall): Promise<ChatCompletion>
  /** Errors before the first chunk reject the first `next()`; later ones end the iteration with a throw. */
  chatStream(req: ChatRequest, call: UpstreamCall): AsyncIterable<ChatChunk>
  embed?(req: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResponse>
}

import type { Dispatcher } from 'undici'
import type { Logger } from '../logger.ts'
import type { ChatRequest, ReasoningDetail } from '../schemas/chat.ts'
import type { EmbeddingsRequest } from '../schemas/embeddings.ts'

// Junction's own shapes: the OpenAI chat-completions contract of docs/design/api-contract.md. Adapters translate
// their upstream protocol to and from these; routes never see a provider's wire format.

// Request types are the zod schemas' output (schemas/), re-exported here so every importer keeps one
// place to take them from; response types below are written by hand: they are what Junction produces.
export type {
  AssistantMessage,
  AudioPart,
  ChatMessage,
  ChatRequest,
  ContentPart,
  CustomTool,
  FilePart,
  FunctionTool,
  ImagePart,
  InstructionMessage,
  KnownContentPart,
  OtherContentPart,
  ReasoningDetail,
  ReasoningOptions,
  RefusalPart,
  Role,
  TextPart,
  Tool,
  ToolCallParam,
  ToolChoice,
  ToolMessage,
} from '../schemas/chat.ts'
export { isKnownContentPart } from '../schemas/chat.ts'
export type { EmbeddingsRequest } from '../schemas/embeddings.ts'

/** A tool call in an answer. */
export interface ToolCall {
  id: string
  type: 'function' | string
  function: { name: string; arguments: string }
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

export interface EmbeddingsResponse {
  object: 'list'
  data: { object: 'embedding'; index: number; embedding: number[] | string }[]
  model: string
  usage: { prompt_tokens: number; total_tokens: number }
  [key: string]: unknown
}

/** `replicate` serves predictions only (image and video models); the others chat too. */
export type ProviderKind = 'openai-compat' | 'anthropic' | 'gemini' | 'replicate' | 'mock'

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
  /**
   * OpenAI-compatible only: the field that carries the output limit. OpenAI's reasoning models take
   * only `max_completion_tokens`; many compatible servers (Mistral, DeepSeek, vLLM, Ollama) only
   * `max_tokens`. Whichever the client used is sent in this one.
   */
  outputLimitField: 'max_completion_tokens' | 'max_tokens'
  /** How often one of its deployments is tried within one request (inference/attempts.ts). */
  retry: RetryPolicy
}

/** How often one deployment is tried within one request, and how long to wait between its tries. */
export interface RetryPolicy {
  /** Tries of one deployment per request (1 = never the same deployment twice). */
  attemptsPerDeployment: number
  /** First wait before trying the same deployment again; doubled each time, with jitter. */
  backoffMs: number
  maxBackoffMs: number
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
  /** W3C trace context to send upstream (the client's trace, this call as its parent span). */
  traceparent?: string
}

export interface ProviderAdapter {
  chat(req: ChatRequest, call: UpstreamCall): Promise<ChatCompletion>
  /**
   * The answer's chunks in order, in batches (those of one upstream read together; never an empty one).
   * Errors before the first chunk reject the first `next()`; later ones end the iteration with a throw.
   */
  chatStream(req: ChatRequest, call: UpstreamCall): AsyncIterable<ChatChunk[]>
  embed?(req: EmbeddingsRequest, call: UpstreamCall): Promise<EmbeddingsResponse>
  /** The prompt's input tokens as the upstream counts them, where it offers counting (Anthropic). */
  countTokens?(req: ChatRequest, call: UpstreamCall): Promise<number>
}

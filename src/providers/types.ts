import type { Dispatcher } from 'undici'
import type { Logger } from '../logger.ts'
import type { ChatRequest } from '../schemas/chat.ts'
import type { EmbeddingsRequest } from '../schemas/embeddings.ts'
import type { ChatChunk, ChatCompletion, EmbeddingsResponse } from '../domain/chat.ts'
import type { ProviderKind } from '../domain/models.ts'

// The capability interfaces every provider adapter implements, and the configured upstream they call.
// The answers they produce (ChatCompletion, ChatChunk, Usage, …) are domain/chat.ts's.

// Request types are the zod schemas' output (schemas/), re-exported here so every importer keeps one
// place to take them from.
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

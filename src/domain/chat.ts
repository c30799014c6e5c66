// Junction's own chat shapes: the OpenAI chat-completions contract of docs/design/api-contract.md.
// Adapters translate their upstream protocol to and from these; routes never see a provider's wire
// format. The request types are the zod schemas' output (schemas/chat.ts) and stay there; the answers
// below are written by hand: they are what Junction produces.

/** One entry of a message's `reasoning_details` (as schemas/chat.ts accepts it: unknown fields kept). */
export interface ReasoningDetail {
  type: string
  text?: string
  signature?: string
  format?: string
  index?: number
  [key: string]: unknown
}

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

import type { ChatMessage, ChatRequest, EmbeddingsRequest } from '../types.ts'

// Junction's fields that an OpenAI-compatible upstream does not know. Everything else, including
// fields Junction has never heard of, is forwarded unchanged (docs/design/decisions.md: forward compatibility).
const gatewayOnlyFields = ['provider', 'model_routing_config', 'reasoning'] as const
const gatewayOnlyMessageFields = ['reasoning', 'reasoning_details'] as const

export function toOpenAIChatRequest(
  req: ChatRequest,
  upstreamModel: string,
  outputLimitField: 'max_completion_tokens' | 'max_tokens' = 'max_completion_tokens',
): Record<string, unknown> {
  const body: Record<string, unknown> = { ...req, model: upstreamModel }
  for (const f of gatewayOnlyFields) delete body[f]
  // One output limit, in the field this upstream understands.
  const limit = req.max_completion_tokens ?? req.max_tokens
  delete body.max_completion_tokens
  delete body.max_tokens
  if (limit !== undefined && limit !== null) body[outputLimitField] = limit
  // `reasoning` (extension) maps to OpenAI's own control when the client did not set that directly.
  if (req.reasoning && req.reasoning_effort === undefined) {
    body.reasoning_effort = req.reasoning.enabled ? (req.reasoning.effort ?? 'medium') : undefined
  }
  body.messages = req.messages.map(stripMessage)
  if (req.stream) {
    // Always ask for usage: billing needs it. The route drops the usage chunk when the client
    // did not ask for it.
    body.stream_options = { ...(req.stream_options ?? {}), include_usage: true }
  }
  return body
}

function stripMessage(m: ChatMessage): ChatMessage {
  if (!gatewayOnlyMessageFields.some((f) => f in m)) return m
  const copy = { ...m }
  for (const f of gatewayOnlyMessageFields) delete copy[f]
  return copy
}

export function toOpenAIEmbeddingsRequest(
  req: EmbeddingsRequest,
  upstreamModel: string,
): Record<string, unknown> {
  return { ...req, model: upstreamModel }
}

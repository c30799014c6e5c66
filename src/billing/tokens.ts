import type { ChatMessage, ChatRequest, EmbeddingsRequest } from '../providers/types.ts'

// Two kinds of counting. Before a request: a cheap, safe upper bound (no tokenizer on the hot path).
// After a request whose upstream gave no usage: a real tokenizer (o200k_base, loaded on first use).

/** Images cost at most this many prompt tokens at the providers we know (high detail, large tile counts). */
const IMAGE_TOKEN_BOUND = 2_000
/** Role markers and separators per message. */
const MESSAGE_OVERHEAD = 8

/** Every BPE token covers at least one UTF-8 byte, so the byte length bounds the token count. */
export function promptTokenBound(req: ChatRequest): number {
  let bound = 0
  for (const m of req.messages) bound += MESSAGE_OVERHEAD + messageBound(m)
  if (req.tools) bound += Buffer.byteLength(JSON.stringify(req.tools))
  if (req.response_format) bound += Buffer.byteLength(JSON.stringify(req.response_format))
  return bound
}

function messageBound(m: ChatMessage): number {
  let bound = 0
  if (typeof m.content === 'string') bound += Buffer.byteLength(m.content)
  else if (Array.isArray(m.content)) {
    for (const part of m.content) {
      if (part.type === 'text' && typeof part.text === 'string') bound += Buffer.byteLength(part.text)
      else if (part.type === 'image_url') bound += IMAGE_TOKEN_BOUND
      else bound += Buffer.byteLength(JSON.stringify(part))
    }
  }
  if (m.tool_calls) bound += Buffer.byteLength(JSON.stringify(m.tool_calls))
  if (typeof m.reasoning === 'string') bound += Buffer.byteLength(m.reasoning)
  return bound
}

export function embeddingTokenBound(req: EmbeddingsRequest): number {
  const inputs = Array.isArray(req.input) ? req.input : [req.input]
  let bound = 0
  for (const i of inputs)
    bound += typeof i === 'string' ? Buffer.byteLength(i) : Array.isArray(i) ? i.length : 1
  return bound
}

/** The text of a chat prompt as a tokenizer should see it, for estimated usage. */
export function promptText(req: ChatRequest): string {
  const parts: string[] = []
  for (const m of req.messages) {
    parts.push(m.role)
    if (typeof m.content === 'string') parts.push(m.content)
    else if (Array.isArray(m.content)) {
      for (const p of m.content) if (p.type === 'text' && typeof p.text === 'string') parts.push(p.text)
    }
    if (m.tool_calls) parts.push(JSON.stringify(m.tool_calls))
  }
  if (req.tools) parts.push(JSON.stringify(req.tools))
  return parts.join('\n')
}

export function imagePartCount(req: ChatRequest): number {
  let count = 0
  for (const m of req.messages) {
    if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'image_url') count++
  }
  return count
}

export type TokenCounter = (text: string) => Promise<number>

let counter: Promise<(text: string) => number> | undefined

/** Counts tokens with gpt-tokenizer's o200k_base encoding, loading it (≈0.2 s, ≈80 MB) on first use. */
export const countTokens: TokenCounter = async (text) => {
  counter ??= import('gpt-tokenizer/encoding/o200k_base').then((m) => m.countTokens)
  return (await counter)(text)
}

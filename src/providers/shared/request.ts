import { invalidRequest, type GatewayError } from '../../errors.ts'
import { mediaTypeOfName } from '../../files/content-type.ts'
import type { ChatRequest, FilePart } from '../types.ts'

// Request translation that every non-OpenAI protocol does the same way. Pure; what differs per
// protocol (the reasons it gives, the wire shapes) stays in its own folder.

/** The OpenAI fields a protocol without logprobs, token bias, web search or audio output refuses. */
export type UnsupportedParam =
  'logit_bias' | 'logprobs' | 'top_logprobs' | 'web_search_options' | 'modalities' | 'audio'

/**
 * Refuses with 400 `unsupported_parameter` what ignoring would silently change for the client (no
 * logprobs, no token bias, no web search, no audio). `provider` and `reasons` make the message:
 * `logprobs is not supported by Gemini models (log probabilities are not translated)`.
 */
export function refuseUnsupported(
  req: ChatRequest,
  provider: string,
  reasons: Readonly<Record<UnsupportedParam, string>>,
): void {
  const refuse = (param: UnsupportedParam): never => {
    throw invalidRequest(
      'unsupported_parameter',
      `${param} is not supported by ${provider} models (${reasons[param]})`,
      param,
    )
  }
  if (req.logit_bias !== undefined && Object.keys(req.logit_bias).length > 0) refuse('logit_bias')
  if (req.logprobs === true) refuse('logprobs')
  if (req.top_logprobs !== undefined && req.top_logprobs > 0) refuse('top_logprobs')
  if (req.web_search_options !== undefined && req.web_search_options !== null) refuse('web_search_options')
  const modalities = req.modalities
  if (Array.isArray(modalities) && modalities.some((m) => m !== 'text')) refuse('modalities')
  if (req.audio !== undefined && req.audio !== null) refuse('audio')
}

export interface ResolvedReasoning {
  enabled: boolean
  effort?: 'low' | 'medium' | 'high'
  maxTokens?: number
  /** Remove reasoning text from the answer (tokens are still counted). */
  exclude: boolean
}

/** `reasoning` (Junction's extension) wins over OpenAI's `reasoning_effort`; none of both: undefined. */
export function resolveReasoning(req: ChatRequest): ResolvedReasoning | undefined {
  const fromEffort = (e: ChatRequest['reasoning_effort']): ResolvedReasoning['effort'] =>
    e === 'minimal' ? 'low' : e === 'xhigh' ? 'high' : e === 'none' || e === undefined ? undefined : e
  if (req.reasoning) {
    return {
      enabled: req.reasoning.enabled,
      effort: req.reasoning.effort ?? fromEffort(req.reasoning_effort),
      maxTokens: req.reasoning.max_tokens,
      exclude: req.reasoning.exclude === true,
    }
  }
  if (req.reasoning_effort === undefined) return undefined
  return {
    enabled: req.reasoning_effort !== 'none',
    effort: fromEffort(req.reasoning_effort),
    exclude: false,
  }
}

/** `data:<type>;base64,<data>` → its parts; undefined for anything else. */
export function parseDataUrl(url: string): { mediaType: string; base64: string } | undefined {
  const m = /^data:([\w.+-]+\/[\w.+-]+)((?:;[^;,]*)*);base64,(.*)$/is.exec(url)
  if (!m) return undefined
  return { mediaType: (m[1] as string).toLowerCase(), base64: m[3] as string }
}

/** A tool call's `arguments` string as the JSON object both protocols send back; '' is `{}`. */
export function parseArguments(args: string, at: string): Record<string, unknown> {
  if (args.trim() === '') return {}
  let value: unknown
  try {
    value = JSON.parse(args)
  } catch {
    throw invalidRequest('invalid_value', 'tool call arguments must be a JSON object', at)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidRequest('invalid_value', 'tool call arguments must be a JSON object', at)
  }
  return value as Record<string, unknown>
}

/** The function name an `allowed_tools.tools` entry names: `{type, function: {name}}` or `{type, name}`. */
export function allowedToolName(entry: Record<string, unknown>): string[] {
  const fn = entry.function
  if (typeof fn === 'object' && fn !== null && 'name' in fn && typeof fn.name === 'string') return [fn.name]
  return typeof entry.name === 'string' ? [entry.name] : []
}

/**
 * A `file` part's inline content: its base64 and its media type (from the data URL, else from the
 * file name). A bare `file_id` is refused: the chat route resolves the caller's ids before any adapter.
 */
export function inlineFileData(
  { file }: FilePart,
  at: string,
): { mediaType: string | undefined; base64: string } {
  if (file.file_data === undefined) {
    throw invalidRequest(
      'unsupported_parameter',
      'file_id references are not resolved for this model',
      `${at}.file`,
    )
  }
  const data = parseDataUrl(file.file_data)
  return {
    mediaType: data?.mediaType ?? mediaTypeOfName(file.filename),
    base64: data?.base64 ?? file.file_data,
  }
}

/** A content part the provider's API has no counterpart for: 400 naming the part's type. */
export function unsupportedPart(providerModels: string, type: string, at: string): GatewayError {
  return invalidRequest(
    'unsupported_parameter',
    `content parts of type ${JSON.stringify(type)} are not supported by ${providerModels} models`,
    `${at}.type`,
  )
}

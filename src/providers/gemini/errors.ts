import { UpstreamError, type GatewayError } from '../../errors.ts'
import { scrubSecrets } from '../http.ts'
import {
  credentialsRefused,
  errorBodyJson,
  isClientError,
  rateLimited,
  upstreamFault,
  upstreamRejected,
} from '../shared/errors.ts'
import { geminiErrorBodySchema } from './wire.ts'

// Gemini errors: `{"error": {"code": 429, "message": "…", "status": "RESOURCE_EXHAUSTED", "details": […]}}`.
// https://ai.google.dev/gemini-api/docs/troubleshooting — 400 INVALID_ARGUMENT / FAILED_PRECONDITION,
// 403 PERMISSION_DENIED, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 500 INTERNAL, 503 UNAVAILABLE,
// 504 DEADLINE_EXCEEDED.

interface ParsedError {
  message?: string
  status?: string
  /** From a google.rpc.RetryInfo detail (`"retryDelay": "28s"`), whole seconds rounded up. */
  retryDelay?: string
  /** From a google.rpc.ErrorInfo detail, e.g. API_KEY_INVALID. */
  reason?: string
}

function parseBody(body: unknown): ParsedError {
  let json = errorBodyJson(body)
  // Some Google front ends answer with a one-element array around the error.
  if (Array.isArray(json)) json = json[0]
  const r = geminiErrorBodySchema.safeParse(json)
  if (!r.success) return {}
  const out: ParsedError = { message: r.data.error.message, status: r.data.error.status }
  for (const d of r.data.error.details ?? []) {
    const delay = (d as { retryDelay?: unknown }).retryDelay
    if (typeof delay === 'string') {
      const seconds = /^(\d+(?:\.\d+)?)s$/.exec(delay)
      if (seconds) out.retryDelay = String(Math.ceil(Number(seconds[1])))
    }
    const reason = (d as { reason?: unknown }).reason
    if (typeof reason === 'string') out.reason = reason
  }
  return out
}

/** Maps a Gemini HTTP error. The provider's message reaches the client only for a 4xx it caused. */
export function fromGeminiError(
  provider: string,
  status: number,
  body: unknown,
  retryAfter: string | undefined,
  secrets: (string | undefined)[] = [],
): GatewayError {
  const e = parseBody(body)
  if (status === 429) return rateLimited(provider, retryAfter, e.retryDelay)
  // Gemini answers a bad key with 400 INVALID_ARGUMENT: that is the gateway's problem, not the client's.
  if (status === 401 || status === 403 || e.reason === 'API_KEY_INVALID' || e.status === 'UNAUTHENTICATED') {
    return credentialsRefused(provider, status)
  }
  if (status === 504) {
    return new UpstreamError('upstream_timeout', `upstream ${provider} timed out (504)`, {
      provider,
      upstreamStatus: 504,
      retryable: true,
    })
  }
  if (isClientError(status)) {
    return upstreamRejected(provider, status, e.message ? scrubSecrets(e.message, secrets) : undefined)
  }
  return upstreamFault(provider, `${status === 503 ? 'is overloaded' : 'failed'} (${status})`, status)
}

/** An error object inside a stream that had already started (HTTP status 200). */
export function fromGeminiStreamError(provider: string, event: unknown): GatewayError {
  const { status } = parseBody(event)
  return upstreamFault(provider, `failed mid-stream (${status ?? 'error'})`, 200, event)
}

import type { GatewayError } from '../../errors.ts'
import { scrubSecrets } from '../http.ts'
import {
  credentialsRefused,
  errorBodyJson,
  isClientError,
  rateLimited,
  upstreamFault,
  upstreamRejected,
} from '../shared/errors.ts'
import { anthropicErrorBodySchema } from './wire.ts'

// Anthropic errors: `{"type": "error", "error": {"type": "overloaded_error", "message": "…"}}`.
// https://docs.anthropic.com/en/api/errors — 400 invalid_request_error, 401 authentication_error,
// 403 permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error,
// 500 api_error, 529 overloaded_error.

function parseBody(body: unknown): { type?: string; message?: string } {
  const r = anthropicErrorBodySchema.safeParse(errorBodyJson(body))
  return r.success ? r.data.error : {}
}

/** Maps an Anthropic HTTP error. The provider's message reaches the client only for a 4xx it caused. */
export function fromAnthropicError(
  provider: string,
  status: number,
  body: unknown,
  retryAfter: string | undefined,
  secrets: (string | undefined)[] = [],
): GatewayError {
  const { type, message } = parseBody(body)
  if (status === 429 || type === 'rate_limit_error') return rateLimited(provider, retryAfter)
  if (status === 529 || type === 'overloaded_error')
    return upstreamFault(provider, `is overloaded (${status})`, status)
  if (status === 401 || status === 403) return credentialsRefused(provider, status)
  if (isClientError(status)) {
    return upstreamRejected(provider, status, message ? scrubSecrets(message, secrets) : undefined)
  }
  return upstreamFault(provider, `failed (${status})`, status)
}

/** An `error` event inside a stream that had already started (HTTP status 200). */
export function fromAnthropicStreamError(provider: string, event: unknown): GatewayError {
  const { type } = parseBody(event)
  const what = type === 'overloaded_error' ? 'is overloaded' : `failed mid-stream (${type ?? 'error'})`
  return upstreamFault(provider, what, 200, event)
}

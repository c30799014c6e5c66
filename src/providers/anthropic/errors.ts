import { GatewayError } from '../../errors.ts'
import { scrubSecrets } from '../http.ts'
import { anthropicErrorBodySchema } from './wire.ts'

// Anthropic errors: `{"type": "error", "error": {"type": "overloaded_error", "message": "…"}}`.
// https://docs.anthropic.com/en/api/errors — 400 invalid_request_error, 401 authentication_error,
// 403 permission_error, 404 not_found_error, 413 request_too_large, 429 rate_limit_error,
// 500 api_error, 529 overloaded_error.

function parseBody(body: unknown): { type?: string; message?: string } {
  let json = body
  if (typeof body === 'string') {
    try {
      json = JSON.parse(body)
    } catch {
      return {}
    }
  }
  const r = anthropicErrorBodySchema.safeParse(json)
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
  if (status === 429 || type === 'rate_limit_error') {
    const headers: Record<string, string> = {}
    if (retryAfter && /^\d+$/.test(retryAfter)) headers['retry-after'] = retryAfter
    return new GatewayError(
      429,
      'rate_limit_error',
      'rate_limit_exceeded',
      `upstream ${provider} is rate limiting (429)`,
      {
        headers,
        retryable: true,
      },
    )
  }
  if (status === 529 || type === 'overloaded_error') {
    return new GatewayError(
      502,
      'upstream_error',
      'upstream_error',
      `upstream ${provider} is overloaded (${status})`,
      {
        retryable: true,
      },
    )
  }
  if (status === 401 || status === 403) {
    return new GatewayError(
      502,
      'upstream_error',
      'upstream_error',
      `upstream ${provider} refused the gateway's credentials (${status})`,
      { retryable: true },
    )
  }
  if (status >= 400 && status < 500 && status !== 408) {
    const text = message ? scrubSecrets(message, secrets) : undefined
    return new GatewayError(
      400,
      'invalid_request_error',
      'upstream_invalid_request',
      text ? `upstream ${provider}: ${text}` : `upstream ${provider} rejected the request (${status})`,
    )
  }
  return new GatewayError(
    502,
    'upstream_error',
    'upstream_error',
    `upstream ${provider} failed (${status})`,
    {
      retryable: true,
    },
  )
}

/** An `error` event inside a stream that had already started (HTTP status 200). */
export function fromAnthropicStreamError(provider: string, event: unknown): GatewayError {
  const { type } = parseBody(event)
  const what = type === 'overloaded_error' ? 'is overloaded' : `failed mid-stream (${type ?? 'error'})`
  return new GatewayError(502, 'upstream_error', 'upstream_error', `upstream ${provider} ${what}`, {
    retryable: true,
    cause: event,
  })
}

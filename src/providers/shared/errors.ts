import { UpstreamError } from '../../errors.ts'

// The GatewayErrors every protocol's errors.ts maps upstream failures to. Which upstream answer
// becomes which, and in what order the checks run, stays in the protocol's own errors.ts.

/** An error body as JSON: text is parsed (undefined when it is not JSON), anything else is taken as is. */
export function errorBodyJson(body: unknown): unknown {
  if (typeof body !== 'string') return body
  try {
    return JSON.parse(body)
  } catch {
    return undefined
  }
}

/** A 4xx the client caused; 408 is the upstream timing out, not the client's fault. */
export function isClientError(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408
}

/**
 * 429, retryable elsewhere. The upstream's Retry-After goes on when it is whole seconds, else
 * `fallback` (a delay the protocol found in the body), else none.
 */
export function rateLimited(
  provider: string,
  retryAfter: string | undefined,
  fallback?: string,
): UpstreamError {
  const headers: Record<string, string> = { 'x-ratelimit-scope': 'upstream' }
  const after = retryAfter && /^\d+$/.test(retryAfter) ? retryAfter : fallback
  if (after) headers['retry-after'] = after
  return new UpstreamError('rate_limit_exceeded', `upstream ${provider} is rate limiting (429)`, {
    provider,
    upstreamStatus: 429,
    headers,
    retryable: true,
  })
}

/** The upstream refused the gateway's key: the gateway's problem (502), never the client's. */
export function credentialsRefused(provider: string, status: number): UpstreamError {
  return new UpstreamError(
    'upstream_error',
    `upstream ${provider} refused the gateway's credentials (${status})`,
    { provider, upstreamStatus: status, retryable: true },
  )
}

/** A request the upstream rejected as the client's fault: 400 with its `message`, already scrubbed. */
export function upstreamRejected(
  provider: string,
  status: number,
  message: string | undefined,
): UpstreamError {
  return new UpstreamError(
    'upstream_invalid_request',
    message ? `upstream ${provider}: ${message}` : `upstream ${provider} rejected the request (${status})`,
    { provider, upstreamStatus: status },
  )
}

/**
 * The upstream's fault (502, retryable elsewhere): `upstream <provider> <what>`. `status` is the
 * HTTP status it answered, 200 for a failure inside a stream that had started.
 */
export function upstreamFault(
  provider: string,
  what: string,
  status: number,
  cause?: unknown,
): UpstreamError {
  return new UpstreamError('upstream_error', `upstream ${provider} ${what}`, {
    provider,
    upstreamStatus: status,
    retryable: true,
    cause,
  })
}

import { GatewayError } from '../../errors.ts'
import { scrubSecrets } from '../http.ts'
import { openAIErrorBodySchema } from './wire.ts'

/** The provider's own message, if its error body has one, with anything secret removed. */
function upstreamMessage(body: string, secrets: (string | undefined)[]): string | undefined {
  let parsed: unknown
  try {
    parsed = JSON.parse(body)
  } catch {
    return undefined
  }
  const r = openAIErrorBodySchema.safeParse(parsed)
  if (!r.success) return undefined
  const m = typeof r.data.error === 'string' ? r.data.error : r.data.error.message
  return m ? scrubSecrets(m, secrets) : undefined
}

/**
 * Maps an OpenAI-compatible error response. A 4xx the client caused becomes a 400 with the provider's
 * message; a refused gateway key or an upstream fault is the gateway's problem (502), never echoed raw.
 */
export function fromOpenAIError(
  provider: string,
  status: number,
  body: string,
  retryAfter: string | undefined,
  secrets: (string | undefined)[] = [],
): GatewayError {
  const message = upstreamMessage(body, secrets)
  if (status === 429) {
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
  if (status === 401 || status === 403) {
    return new GatewayError(
      502,
      'upstream_error',
      'upstream_error',
      `upstream ${provider} refused the gateway's credentials (${status})`,
      {
        retryable: true,
      },
    )
  }
  if (status >= 400 && status < 500 && status !== 408) {
    return new GatewayError(
      400,
      'invalid_request_error',
      'upstream_invalid_request',
      message ? `upstream ${provider}: ${message}` : `upstream ${provider} rejected the request (${status})`,
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

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
import { openAIErrorBodySchema } from './wire.ts'

/** The provider's own message, if its error body has one, with anything secret removed. */
function upstreamMessage(body: string, secrets: (string | undefined)[]): string | undefined {
  const r = openAIErrorBodySchema.safeParse(errorBodyJson(body))
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
  if (status === 429) return rateLimited(provider, retryAfter)
  if (status === 401 || status === 403) return credentialsRefused(provider, status)
  if (isClientError(status)) return upstreamRejected(provider, status, message)
  return upstreamFault(provider, `failed (${status})`, status)
}

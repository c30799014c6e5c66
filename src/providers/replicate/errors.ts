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
import { replicateErrorBodySchema } from './wire.ts'

/** The problem's `detail` (else its `title`), with anything secret removed. */
function upstreamMessage(body: string, secrets: (string | undefined)[]): string | undefined {
  const r = replicateErrorBodySchema.safeParse(errorBodyJson(body))
  if (!r.success) return undefined
  const m = r.data.detail ?? r.data.title
  return m ? scrubSecrets(m, secrets) : undefined
}

/**
 * Maps a Replicate error response. An input the model refuses (422) or another 4xx the client caused
 * becomes a 400 with Replicate's detail; a refused token or an upstream fault is the gateway's (502).
 */
export function fromReplicateError(
  provider: string,
  status: number,
  body: string,
  retryAfter: string | undefined,
  secrets: (string | undefined)[] = [],
): GatewayError {
  if (status === 429) return rateLimited(provider, retryAfter)
  if (status === 401 || status === 403) return credentialsRefused(provider, status)
  if (isClientError(status)) return upstreamRejected(provider, status, upstreamMessage(body, secrets))
  return upstreamFault(provider, `failed (${status})`, status)
}

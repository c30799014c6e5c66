import type { GatewayError } from '../../errors.ts'

// Junction's errors in Anthropic's shape, for the /v1/messages routes. Pure.
// https://docs.anthropic.com/en/api/errors

export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'billing_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'timeout_error'
  | 'overloaded_error'

export interface AnthropicErrorBody {
  type: 'error'
  error: { type: AnthropicErrorType; message: string }
  /** Junction's request id (also the `x-request-id` and `request-id` headers). */
  request_id?: string
}

/** By status, as Anthropic's error types are; Junction's own code stays in the log. */
export function toAnthropicErrorType(status: number): AnthropicErrorType {
  if (status === 401) return 'authentication_error'
  if (status === 402) return 'billing_error'
  if (status === 403) return 'permission_error'
  if (status === 404) return 'not_found_error'
  if (status === 413) return 'request_too_large'
  if (status === 429) return 'rate_limit_error'
  if (status === 503 || status === 529) return 'overloaded_error'
  if (status === 504) return 'timeout_error'
  if (status >= 500) return 'api_error'
  return 'invalid_request_error'
}

export function toAnthropicErrorBody(e: GatewayError, requestId?: string): AnthropicErrorBody {
  const body: AnthropicErrorBody = {
    type: 'error',
    error: { type: toAnthropicErrorType(e.status), message: e.message },
  }
  if (requestId !== undefined) body.request_id = requestId
  return body
}

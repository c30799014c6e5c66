import { ZodError, type core } from 'zod'

/** The error types of decisions.md's envelope. */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'insufficient_credits'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'upstream_error'
  | 'service_unavailable'
  | 'timeout_error'
  | 'server_error'

export interface GatewayErrorOptions {
  param?: string | null
  /** Extra response headers (Retry-After, X-RateLimit-*). */
  headers?: Record<string, string>
  /** Whether another attempt (or another provider) might succeed. */
  retryable?: boolean
  /** Logged, never sent to the client. */
  cause?: unknown
}

/** The one error type of the gateway: everything thrown is mapped to it before it reaches a client. */
export class GatewayError extends Error {
  readonly status: number
  readonly type: ErrorType
  readonly code: string
  readonly param: string | null
  readonly headers: Record<string, string>
  readonly retryable: boolean

  constructor(
    status: number,
    type: ErrorType,
    code: string,
    message: string,
    options: GatewayErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'GatewayError'
    this.status = status
    this.type = type
    this.code = code
    this.param = options.param ?? null
    this.headers = options.headers ?? {}
    this.retryable = options.retryable ?? false
  }
}

export interface ErrorBody {
  error: { message: string; type: ErrorType; code: string; param: string | null }
  request_id?: string
}

export function toErrorBody(e: GatewayError, requestId?: string): ErrorBody {
  const body: ErrorBody = { error: { message: e.message, type: e.type, code: e.code, param: e.param } }
  if (requestId !== undefined) body.request_id = requestId
  return body
}

export const invalidRequest = (code: string, message: string, param: string | null = null): GatewayError =>
  new GatewayError(400, 'invalid_request_error', code, message, { param })

/** `['messages', 0, 'role']` → `messages[0].role` */
export function formatPath(path: readonly PropertyKey[]): string | null {
  let out = ''
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`
    else out += out === '' ? String(key) : `.${String(key)}`
  }
  return out === '' ? null : out
}

/**
 * The first zod issue becomes the client's 400; `params.code` on a custom issue overrides the code.
 * Parse with `{ reportInput: true }`: without the input, a missing field can't be told from a wrong type.
 */
export function fromZodError(err: ZodError): GatewayError {
  const issue = err.issues[0]
  if (issue === undefined) return invalidRequest('invalid_value', 'invalid request')
  const param = formatPath(issue.path)
  const code = issueCode(issue)
  const message = param === null ? issue.message : `${param}: ${issue.message}`
  return invalidRequest(code, message, param)
}

function issueCode(issue: core.$ZodIssue): string {
  if (issue.code === 'custom' && typeof issue.params?.code === 'string') return issue.params.code
  if (issue.code === 'invalid_type' && issue.input === undefined) return 'missing_field'
  if (issue.code === 'unrecognized_keys') return 'unsupported_parameter'
  return 'invalid_value'
}

interface FastifyLikeError {
  code?: string
  statusCode?: number
  message?: string
}

/** Fastify's own errors (FST_ERR_*) mapped to the envelope. */
const fastifyCodes: Record<string, (e: FastifyLikeError) => GatewayError> = {
  FST_ERR_CTP_INVALID_JSON_BODY: () => invalidRequest('invalid_json', 'request body is not valid JSON'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () =>
    invalidRequest('invalid_json', 'request body is empty but content-type is application/json'),
  FST_ERR_CTP_BODY_TOO_LARGE: () =>
    new GatewayError(413, 'invalid_request_error', 'payload_too_large', 'request body is too large'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () =>
    new GatewayError(415, 'invalid_request_error', 'unsupported_media_type', 'unsupported content type'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () =>
    invalidRequest('invalid_value', 'content-length does not match the body'),
}

export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err
  if (err instanceof ZodError) return fromZodError(err)
  if (typeof err === 'object' && err !== null) {
    const e = err as FastifyLikeError
    const mapped = e.code === undefined ? undefined : fastifyCodes[e.code]
    if (mapped) return mapped(e)
    if (err instanceof SyntaxError && e.statusCode === 400) {
      return invalidRequest('invalid_json', 'request body is not valid JSON')
    }
    if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
      return invalidRequest('invalid_request', e.message ?? 'invalid request')
    }
  }
  return new GatewayError(500, 'server_error', 'internal_error', 'internal error', { cause: err })
}

import type { ZodError, core } from 'zod'

/** The error types of the envelope (docs/design/decisions.md). */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'insufficient_credits'
  | 'permission_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'upstream_error'
  | 'service_unavailable'
  | 'timeout_error'
  | 'server_error'

/**
 * Every error code the gateway sends, with its status and type: a code is chosen at the throw site,
 * status and type follow from it, so the same code never answers two ways. `errorWhen` below says when
 * each happens.
 */
export const errorCatalogue = {
  invalid_value: { status: 400, type: 'invalid_request_error' },
  missing_field: { status: 400, type: 'invalid_request_error' },
  unsupported_parameter: { status: 400, type: 'invalid_request_error' },
  invalid_json: { status: 400, type: 'invalid_request_error' },
  invalid_request: { status: 400, type: 'invalid_request_error' },
  too_deep: { status: 400, type: 'invalid_request_error' },
  file_limit_exceeded: { status: 400, type: 'invalid_request_error' },
  too_many_keys: { status: 400, type: 'invalid_request_error' },
  /** The provider rejected the request as the client's fault; its (scrubbed) message is kept. */
  upstream_invalid_request: { status: 400, type: 'invalid_request_error' },
  missing_api_key: { status: 401, type: 'authentication_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  invalid_admin_key: { status: 401, type: 'authentication_error' },
  /** A console session cookie that is forged, signed out, or whose key was revoked. */
  invalid_session: { status: 401, type: 'authentication_error' },
  session_expired: { status: 401, type: 'authentication_error' },
  /** A key its account disabled, or one past its `expires_at`. */
  key_disabled: { status: 401, type: 'authentication_error' },
  key_expired: { status: 401, type: 'authentication_error' },
  insufficient_credits: { status: 402, type: 'insufficient_credits' },
  /** The key spent its limit (in its current window): the account may still have credits. */
  key_limit_exceeded: { status: 402, type: 'insufficient_credits' },
  /** An output URL whose signature is not the gateway's, or whose time is up. */
  invalid_signature: { status: 403, type: 'permission_error' },
  url_expired: { status: 403, type: 'permission_error' },
  /** A CORS preflight from an origin (or with a method or header) server.cors does not allow. */
  origin_not_allowed: { status: 403, type: 'permission_error' },
  /** A state-changing call made with a console session but without its CSRF token. */
  invalid_csrf_token: { status: 403, type: 'permission_error' },
  /** A key whose `allowed_models` does not cover the model asked for. */
  model_not_allowed: { status: 403, type: 'permission_error' },
  /** A management key on a route that calls a model, or an inference key on the key API. */
  management_key_not_allowed: { status: 403, type: 'permission_error' },
  management_key_required: { status: 403, type: 'permission_error' },
  route_not_found: { status: 404, type: 'not_found_error' },
  model_not_found: { status: 404, type: 'not_found_error' },
  file_not_found: { status: 404, type: 'not_found_error' },
  generation_not_found: { status: 404, type: 'not_found_error' },
  prediction_not_found: { status: 404, type: 'not_found_error' },
  response_not_found: { status: 404, type: 'not_found_error' },
  output_not_found: { status: 404, type: 'not_found_error' },
  account_not_found: { status: 404, type: 'not_found_error' },
  key_not_found: { status: 404, type: 'not_found_error' },
  method_not_allowed: { status: 405, type: 'invalid_request_error' },
  request_timeout: { status: 408, type: 'invalid_request_error' },
  invalid_state: { status: 409, type: 'invalid_request_error' },
  account_exists: { status: 409, type: 'invalid_request_error' },
  idempotency_key_reused: { status: 409, type: 'invalid_request_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  uri_too_long: { status: 414, type: 'invalid_request_error' },
  unsupported_media_type: { status: 415, type: 'invalid_request_error' },
  /** A byte range of an output that starts past its end. */
  range_not_satisfiable: { status: 416, type: 'invalid_request_error' },
  headers_too_large: { status: 431, type: 'invalid_request_error' },
  rate_limit_exceeded: { status: 429, type: 'rate_limit_error' },
  internal_error: { status: 500, type: 'server_error' },
  upstream_error: { status: 502, type: 'upstream_error' },
  no_available_provider: { status: 503, type: 'service_unavailable' },
  shutting_down: { status: 503, type: 'service_unavailable' },
  /** Too many request bytes are held in memory at once: retry shortly. */
  server_busy: { status: 503, type: 'service_unavailable' },
  store_unavailable: { status: 503, type: 'service_unavailable' },
  upstream_timeout: { status: 504, type: 'timeout_error' },
} as const satisfies Record<string, { status: number; type: ErrorType }>

export type ErrorCode = keyof typeof errorCatalogue

/**
 * When each code is sent: the text of the error reference (docs/reference/errors.md, written by
 * `npm run docs`). A code without one does not compile.
 */
export const errorWhen: Record<ErrorCode, string> = {
  invalid_value:
    'A field breaks a rule of the API (`param` names its path, e.g. `messages[0].role`), or a body is malformed in another way.',
  missing_field: 'A required field is absent (`param` names it).',
  unsupported_parameter:
    "A field or value the gateway does not serve: `n` other than 1, an unknown field where none are allowed, a feature the model's provider cannot take.",
  invalid_json: 'The body is not valid JSON, or is empty with `content-type: application/json`.',
  invalid_request: 'The HTTP request itself is malformed (a bad URL, a header or framing Node refuses).',
  too_deep:
    'A JSON body nests objects and arrays deeper than `server.maxJsonDepth` (`param` names the place).',
  file_limit_exceeded:
    "An upload would pass the account's file count, or a multipart body passes its part limits.",
  upstream_invalid_request:
    "The provider refused the request as the client's fault; its message is kept, secrets removed.",
  missing_api_key: 'No `Authorization: Bearer` (or `x-api-key`) header.',
  invalid_api_key: 'The key is unknown, revoked, or longer than 512 characters.',
  key_disabled:
    'The key was disabled by its account (`PATCH /v1/keys/{hash}` with `disabled: true`) or the operator.',
  key_expired: "The key's `expires_at` has passed.",
  key_limit_exceeded:
    "The key's spending limit (`limit`, in its current `limit_reset` window) has nothing left; nothing was sent upstream.",
  model_not_allowed: "The key's `allowed_models` do not include the requested model (the message names it).",
  management_key_not_allowed:
    'A management key called a model or another route it may not use; it only manages keys and reads usage.',
  management_key_required: 'The key API (`/v1/keys`, `/v1/notices`) was called with an inference key.',
  too_many_keys: 'The account already has 1000 keys.',
  invalid_session:
    'A console session cookie that is forged, signed out, or whose key was revoked, disabled or has expired (sign in again).',
  session_expired: 'A console session past its `sessionTtlMs` (sign in again).',
  invalid_csrf_token:
    'A state-changing call made with a console session cookie but without its `X-CSRF-Token` header, or with a wrong one.',
  invalid_admin_key: 'A call to `/admin` or `/metrics` without the admin key.',
  insufficient_credits:
    'The balance minus the open reservations is not above zero; nothing is sent upstream.',
  invalid_signature:
    "An output URL (`/v1/outputs/…`) whose signature is not the gateway's (a changed id, expiry or signature).",
  url_expired: 'An output URL whose time is up.',
  origin_not_allowed:
    'A CORS preflight from an origin, or with a method or header, that `server.cors` does not allow.',
  route_not_found:
    'No route has this path (the admin API and `/metrics` have none without `GATEWAY_ADMIN_KEY`).',
  model_not_found:
    'An unknown model slug or alias, or a `provider.fallback` or `available_models` entry that names none.',
  file_not_found: "An unknown file id, or another account's.",
  generation_not_found: "An unknown generation id, or another account's (also once retention deleted it).",
  prediction_not_found: "An unknown prediction id, or another account's.",
  response_not_found: "An unknown stored Responses id, or another account's.",
  output_not_found: 'An output deleted after its retention, or never made.',
  account_not_found: 'An admin call naming an account that does not exist.',
  key_not_found: 'An admin call naming a key the account does not have.',
  method_not_allowed:
    'A known path asked with another method; the `Allow` header lists the methods it takes.',
  request_timeout:
    'Headers, body or the whole request arrived too slowly (`server.*TimeoutMs`, `bodyMinBytesPerSecond`); the connection is closed.',
  invalid_state: "An action the object's state does not allow, such as cancelling a finished prediction.",
  account_exists: 'Creating an account whose id exists.',
  idempotency_key_reused: 'An `Idempotency-Key` reused with another body.',
  payload_too_large:
    'A body over `server.bodyLimitBytes`, an upload over its file or account limits, or inlined file bytes over theirs.',
  uri_too_long: 'A path parameter (an id) over 100 characters.',
  unsupported_media_type: 'A body that is not `application/json` (or `multipart/form-data` for uploads).',
  range_not_satisfiable:
    'A byte range of an output that starts past its end; `Content-Range: bytes */<size>` says the size.',
  headers_too_large: 'Request headers over 16 KiB.',
  rate_limit_exceeded:
    "The account's own limit (`X-RateLimit-Scope: account-requests`, `account-tokens` or `account-bodies`) or the upstream's after retries (`upstream`); `Retry-After` says when to retry.",
  internal_error: 'A bug: the details are logged, not sent.',
  upstream_error:
    'The upstream failed after retries and fallbacks: a 5xx, a refused gateway key, a malformed or out-of-order answer.',
  no_available_provider:
    'No enabled provider serves the model, or every deployment is out of rotation (circuit breakers); `Retry-After: 1`.',
  shutting_down: 'The instance is draining after SIGTERM; the connection is closed, retry on another.',
  server_busy:
    'Too many request body bytes are held at once (`server.maxBufferedBodyBytes`); `Retry-After: 1`.',
  store_unavailable: "The database does not answer or fails, or an answer's charge could not be committed.",
  upstream_timeout: 'An upstream connect, first-byte, idle or total timeout, after retries.',
}

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
  readonly code: ErrorCode
  readonly param: string | null
  readonly headers: Record<string, string>
  readonly retryable: boolean

  constructor(code: ErrorCode, message: string, options: GatewayErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'GatewayError'
    const entry = errorCatalogue[code]
    this.status = entry.status
    this.type = entry.type
    this.code = code
    this.param = options.param ?? null
    this.headers = options.headers ?? {}
    this.retryable = options.retryable ?? false
  }
}

/** The codes an upstream failure can have. */
export type UpstreamErrorCode = Extract<
  ErrorCode,
  'upstream_error' | 'upstream_timeout' | 'rate_limit_exceeded' | 'upstream_invalid_request'
>

export interface UpstreamErrorOptions extends Omit<GatewayErrorOptions, 'param'> {
  /** The configured provider that failed (`openai`, `anthropic`, …). */
  provider: string
  /** The upstream's HTTP status; null when no answer came (network error, timeout). */
  upstreamStatus?: number | null
}

/**
 * A failure of an upstream call, keeping the facts routing and metrics read: which provider, what
 * status it answered, and whether another attempt or deployment may succeed.
 */
export class UpstreamError extends GatewayError {
  readonly provider: string
  readonly upstreamStatus: number | null

  constructor(code: UpstreamErrorCode, message: string, options: UpstreamErrorOptions) {
    super(code, message, options)
    this.name = 'UpstreamError'
    this.provider = options.provider
    this.upstreamStatus = options.upstreamStatus ?? null
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

export const invalidRequest = (
  code: Extract<
    ErrorCode,
    | 'invalid_value'
    | 'missing_field'
    | 'unsupported_parameter'
    | 'invalid_json'
    | 'invalid_request'
    | 'too_deep'
  >,
  message: string,
  param: string | null = null,
): GatewayError => new GatewayError(code, message, { param })

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
  // An unknown field is named itself, not its parent object (`input.seed`, not `input`).
  const path =
    issue.code === 'unrecognized_keys' && issue.keys[0] !== undefined
      ? [...issue.path, issue.keys[0]]
      : issue.path
  const param = formatPath(path)
  const code = issueCode(issue)
  const message = param === null ? issue.message : `${param}: ${issue.message}`
  return invalidRequest(code, message, param)
}

function issueCode(issue: core.$ZodIssue): Parameters<typeof invalidRequest>[0] {
  const custom: unknown = issue.code === 'custom' ? issue.params?.code : undefined
  if (
    typeof custom === 'string' &&
    custom in errorCatalogue &&
    errorCatalogue[custom as ErrorCode].status === 400
  )
    return custom as Parameters<typeof invalidRequest>[0]
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
  FST_ERR_CTP_BODY_TOO_LARGE: () => new GatewayError('payload_too_large', 'request body is too large'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () =>
    new GatewayError('unsupported_media_type', 'unsupported content type'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () =>
    invalidRequest('invalid_value', 'content-length does not match the body'),
  FST_ERR_MAX_PARAM_LENGTH: () => new GatewayError('uri_too_long', 'a path parameter is too long'),
  FST_ERR_BAD_URL: () => invalidRequest('invalid_request', 'the request URL is malformed'),
  FST_ERR_ASYNC_CONSTRAINT: () => invalidRequest('invalid_request', 'the request cannot be routed'),
}

/**
 * A zod error, told by its name rather than `instanceof`: this file is the ground floor every thread
 * loads (the database thread too), and importing zod's classes here cost each thread zod itself (≈12 MB).
 */
function isZodError(err: unknown): err is ZodError {
  return (
    err instanceof Error && err.name === 'ZodError' && Array.isArray((err as { issues?: unknown }).issues)
  )
}

export function toGatewayError(err: unknown): GatewayError {
  if (err instanceof GatewayError) return err
  if (isZodError(err)) return fromZodError(err)
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
  return new GatewayError('internal_error', 'internal error', { cause: err })
}

/**
 * A configuration the gateway cannot start with: loadConfig and the config slices throw it naming the
 * offending field; server.ts prints it and exits.
 */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

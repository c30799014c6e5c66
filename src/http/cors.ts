import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { GatewayError, toErrorBody } from '../errors.ts'

// CORS for browser clients of the /v1 and /routed/v1 APIs, off unless `server.cors.allowedOrigins`
// names origins. Written here rather than with @fastify/cors: the rules are a dozen lines (exact
// origins or `*`, a fixed header list with two prefixes), and a denied preflight answers in our error
// envelope. Keys travel in headers, never cookies, so credentials are not allowed.
// https://fetch.spec.whatwg.org/#http-cors-protocol

export interface CorsConfig {
  /** Exact origins (`https://app.example.com`) or `*` for any; empty turns CORS off. */
  allowedOrigins: string[]
}

/** The methods the /v1 routes answer. */
const ALLOWED_METHODS = ['GET', 'POST', 'DELETE', 'OPTIONS']

/**
 * Request headers the OpenAI and Anthropic SDKs (and our own extensions) send from a browser. The
 * SDKs also send `openai-*` and `x-stainless-*` headers (platform, retry count, timeout), allowed by
 * prefix.
 */
const ALLOWED_HEADERS = [
  'authorization',
  'content-type',
  'x-api-key',
  'anthropic-version',
  'anthropic-beta',
  'anthropic-dangerous-direct-browser-access',
  'idempotency-key',
  'x-request-id',
  'traceparent',
  'tracestate',
  'openai-organization',
  'openai-project',
  'openai-beta',
] as const
const ALLOWED_HEADER_PREFIXES = ['openai-', 'x-stainless-'] as const

/** Response headers a page may read: ids to quote in a support request, rate-limit state. */
export const EXPOSED_HEADERS = [
  'x-request-id',
  'x-generation-id',
  'x-ratelimit-limit',
  'x-ratelimit-remaining',
  'x-ratelimit-reset',
  'x-ratelimit-scope',
  'retry-after',
  'x-junction-provider',
  'x-junction-deployment',
  'x-junction-attempts',
].join(', ')

/** Browsers cache an allowed preflight this long (seconds); Chromium caps it at 7200. */
const MAX_AGE_SECONDS = '7200'

/** True when `path` (without query) is under /v1 or /routed/v1, the APIs CORS covers. */
export function isCorsPath(url: string): boolean {
  const path = url.split('?')[0] ?? ''
  return /^\/(routed\/)?v1(\/|$)/.test(path)
}

/** The Access-Control-Allow-Origin value for `origin`, or undefined when it is not allowed. */
export function allowOriginFor(origin: string | undefined, config: CorsConfig): string | undefined {
  if (origin === undefined) return undefined
  if (config.allowedOrigins.includes('*')) return '*'
  return config.allowedOrigins.includes(origin) ? origin : undefined
}

export function isAllowedHeader(name: string): boolean {
  const h = name.trim().toLowerCase()
  return (
    (ALLOWED_HEADERS as readonly string[]).includes(h) || ALLOWED_HEADER_PREFIXES.some((p) => h.startsWith(p))
  )
}

/**
 * The Access-Control-Allow-Headers value for a preflight: the requested headers when all are
 * allowed (a prefix cannot be listed), otherwise undefined (the preflight is refused).
 */
export function allowHeadersFor(requested: string | undefined): string | undefined {
  const names = (requested ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter((h) => h !== '')
  if (names.length === 0) return ALLOWED_HEADERS.join(', ')
  return names.every(isAllowedHeader) ? names.join(', ') : undefined
}

/**
 * Answers preflights (OPTIONS with an Origin) under /v1 and /routed/v1 without authentication, and
 * marks every answer to an allowed origin (errors included) as readable by it. Does nothing when no
 * origin is configured: an OPTIONS is then the usual 404.
 */
export function registerCors(app: FastifyInstance, config: CorsConfig): void {
  if (config.allowedOrigins.length === 0) return
  // Set in onRequest so that every answer, a 401 or a 429 too, carries them.
  app.addHook('onRequest', (request, reply, done) => {
    const origin = request.headers.origin
    if (origin === undefined || !isCorsPath(request.url)) {
      done()
      return
    }
    reply.header('vary', 'Origin')
    const allowed = allowOriginFor(origin, config)
    if (allowed !== undefined) {
      reply.header('access-control-allow-origin', allowed)
      reply.header('access-control-expose-headers', EXPOSED_HEADERS)
    }
    done()
  })
  const preflight = (request: FastifyRequest, reply: FastifyReply) => {
    const origin = request.headers.origin
    const method = request.headers['access-control-request-method']
    if (origin === undefined || method === undefined) {
      // Not a CORS preflight: OPTIONS itself is no operation of the API.
      const e = new GatewayError('route_not_found', `no route for OPTIONS ${request.url.split('?')[0]}`)
      return reply.code(404).send(toErrorBody(e, request.id))
    }
    const requestedHeaders = request.headers['access-control-request-headers']
    const allowHeaders = allowHeadersFor(requestedHeaders)
    const allowed = allowOriginFor(origin, config) !== undefined
    if (!allowed || allowHeaders === undefined || !ALLOWED_METHODS.includes(method.toUpperCase())) {
      const e = new GatewayError(
        'origin_not_allowed',
        !allowed
          ? `origin ${origin} is not in server.cors.allowedOrigins`
          : allowHeaders === undefined
            ? `a header of ${JSON.stringify(requestedHeaders)} is not allowed cross-origin`
            : `method ${method} is not allowed cross-origin`,
      )
      // Without Access-Control-Allow-* the browser refuses the request; the body says why.
      reply.removeHeader('access-control-allow-origin')
      reply.removeHeader('access-control-expose-headers')
      return reply.code(403).send(toErrorBody(e, request.id))
    }
    reply.header('access-control-allow-methods', ALLOWED_METHODS.join(', '))
    reply.header('access-control-allow-headers', allowHeaders)
    reply.header('access-control-max-age', MAX_AGE_SECONDS)
    reply.header('vary', 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers')
    return reply.code(204).send()
  }
  for (const prefix of ['/v1', '/routed/v1']) {
    app.options(prefix, preflight)
    app.options(`${prefix}/*`, preflight)
  }
}

import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify'
import { createConsoleSessions, deriveSessionSecret, requireAccountKey } from './auth/index.ts'
import type { Deps } from './deps.ts'
import { GatewayError, toErrorBody, toGatewayError } from './errors.ts'
import {
  createClientErrorHandler,
  createLingerSlots,
  limitConnectionsPerAddress,
  watchBody,
  writeRawError,
  type LingerSlots,
} from './http/connection.ts'
import { createBodyBudget, createJsonBodyParser, type BodyBudget } from './http/json-body.ts'
import { closeIfBodyUnread, prepareErrorReply } from './http/error-reply.ts'
import { sendAfterDeferredAdmission } from './routes/admission.ts'
import type { PreAdmission } from './inference/generation.ts'
import { accountRoutes } from './routes/account.ts'
import { keysRoutes } from './routes/keys.ts'
import { adminRoutes } from './routes/admin.ts'
import { chatRoutes } from './routes/chat.ts'
import { messagesRoutes } from './routes/messages.ts'
import { embeddingsRoutes } from './routes/embeddings.ts'
import { filesRoutes } from './routes/files.ts'
import { healthRoutes } from './routes/health.ts'
import { metricsRoutes } from './routes/metrics.ts'
import { continueTrace, type TraceContext } from './http/tracing.ts'
import { registerCors } from './http/cors.ts'
import type { GenerationRecord } from './domain/records.ts'
import { toUsd } from './billing/money.ts'
import { finished } from 'node:stream'
import { modelsRoutes } from './routes/models.ts'
import { predictionsRoutes } from './routes/predictions.ts'
import { responsesRoutes } from './routes/responses.ts'
import { outputsRoutes } from './routes/outputs.ts'
import { openapiRoutes } from './routes/openapi.ts'
import { operatorRoutes } from './routes/operator.ts'
import { reportsRoutes } from './routes/reports.ts'
import { loadConsoleAssets } from './console/assets.ts'
import { consoleRoutes } from './console/routes.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** Bytes of JSON bodies still arriving, across all connections (bounded by maxBufferedBodyBytes). */
    bodyBudget: BodyBudget
    /** Connections lingering after an early answer, per account (http/connection.ts). */
    lingerSlots: LingerSlots
    /** Open connections per client address, capped by server.maxConnectionsPerAddress. */
    connectionsByAddress: { count(address: string): number }
  }
  interface FastifyRequest {
    /** What the request's one log line and its metrics report. */
    junction: RequestFacts
  }
}

/** Facts gathered while a request is answered, for its log line and metrics. */
export interface RequestFacts {
  trace?: TraceContext
  record?: GenerationRecord | null
  /** The streamed body being sent, if any (its end comes after the generation is settled). */
  body?: NodeJS.ReadableStream
  /**
   * An event stream being written (routes/chat-call.ts's sendEventStream): settles once it stopped,
   * after its generation is settled.
   */
  eventStream?: Promise<void>
  /** The client closed the connection before the whole answer was written. */
  aborted?: boolean
  /** The request's line was written (exactly once, whichever way it ended). */
  logged?: boolean
  /** The requests-per-minute limit counted this request before its body was read (routes/admission.ts). */
  requestCounted?: boolean
  /** That admission, left to the route's own because the body came with the headers. */
  deferredAdmission?: PreAdmission
}

const requestIdPattern = /^[0-9a-f]{32}$/

/** The methods a 405's `Allow` may name. */
const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const

const isStream = (payload: unknown): payload is NodeJS.ReadableStream =>
  typeof (payload as { pipe?: unknown } | null)?.pipe === 'function'
/** Connections of one account (or of requests without one) lingering at once, at most. */
const LINGER_SLOTS_PER_ACCOUNT = 4

type ServerConfig = Deps['config']['server']
/** Writes a request's one log line and its metrics, once (later calls do nothing). */
type RequestLogger = (request: FastifyRequest, reply: FastifyReply) => void

/** Builds the HTTP app. Never listens: server.ts does, tests use inject or listen on port 0. */
export async function buildApp(deps: Deps): Promise<FastifyInstance> {
  const server = deps.config.server
  const app = createFastify(deps)
  decorateApp(app, server)
  registerJsonBodyParser(app, server)
  const logRequest = createRequestLogger(deps)
  trackEachRequest(app, deps, logRequest)
  watchSlowBodies(app, server)
  setErrorHandlers(app)
  logEachRequest(app, logRequest)
  registerCors(app, server.cors)
  await registerRoutes(app, deps)
  return app
}

/** The Fastify instance with the server's limits and timeouts, request ids and framework errors. */
function createFastify(deps: Deps): FastifyInstance {
  const server = deps.config.server
  return Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: server.bodyLimitBytes,
    keepAliveTimeout: server.keepAliveTimeoutMs,
    // Node checks both timeouts on a timer, and answers 408 through clientErrorHandler.
    requestTimeout: server.requestTimeoutMs,
    http: {
      headersTimeout: server.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(
        30_000,
        Math.max(10, Math.ceil(Math.min(server.headersTimeoutMs, server.requestTimeoutMs) / 10)),
      ),
    },
    clientErrorHandler: createClientErrorHandler(deps.log, () => deps.ids.request()),
    // A malformed URL or an over-long path parameter, refused before routing.
    frameworkErrors: (err, request, genericReply) => {
      const reply = genericReply as FastifyReply
      const e = toGatewayError(err)
      request.log.info({ status: e.status, code: e.code }, 'request rejected')
      closeIfBodyUnread(request, reply)
      void reply.code(e.status).header('x-request-id', request.id).send(toErrorBody(e, request.id))
    },
    // A caller's own request id is kept when it has our form, so logs of both sides line up.
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && requestIdPattern.test(given) ? given : deps.ids.request()
    },
    // The drain check (trackEachRequest) answers with the error envelope instead.
    return503OnClosing: false,
    // One line per request, written by createRequestLogger's logger, instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    routerOptions: { ignoreTrailingSlash: true },
  })
}

/** The request's account, key and facts; the app's linger slots, connection counts and body budget. */
function decorateApp(app: FastifyInstance, server: ServerConfig): void {
  app.decorateRequest('account', null as never)
  app.decorateRequest('apiKey', null as never)
  app.decorateRequest('junction', null as never)
  app.decorate('lingerSlots', createLingerSlots(LINGER_SLOTS_PER_ACCOUNT))
  app.decorate(
    'connectionsByAddress',
    limitConnectionsPerAddress(app.server, server.maxConnectionsPerAddress),
  )
  app.decorate(
    'bodyBudget',
    createBodyBudget(server.maxBufferedBodyBytes, server.maxBufferedBodyBytesPerAccount),
  )
}

function registerJsonBodyParser(app: FastifyInstance, server: ServerConfig): void {
  // Every body the API takes is JSON (multipart is added per route); plain text is a 415.
  app.removeContentTypeParser('text/plain')
  app.removeContentTypeParser('application/json')
  app.addContentTypeParser(
    'application/json',
    createJsonBodyParser({
      bodyLimit: server.bodyLimitBytes,
      maxDepth: server.maxJsonDepth,
      budget: app.bodyBudget,
    }),
  )
}

/**
 * Every request: its id header and facts, the in-flight count server.ts drains, the client gone before
 * the answer's end (aborted, logged once its body closes), and the 503 while draining.
 */
function trackEachRequest(app: FastifyInstance, deps: Deps, logRequest: RequestLogger): void {
  // Callback style: this runs on every request, and a sync hook costs no promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    request.junction = { trace: continueTrace(request.headers.traceparent) }
    // server.ts waits for this to reach 0 after SIGTERM; 'close' comes after the answer or an abort.
    deps.lifecycle.inFlight++
    // One listener for both (a second 'close' listener on every response is an array and a wrapper).
    reply.raw.once('close', () => {
      deps.lifecycle.inFlight--
      // Ended by us is not aborted, even when the client closed before the last write's callback (a
      // download read whole can close its side first, and 'finish' then never comes).
      if (reply.raw.writableFinished || reply.raw.writableEnded) return
      // The client went before the answer's end. A stream's generator settles the generation in its
      // `finally` before the body stream closes; a route still running is logged when it sends.
      request.junction.aborted = true
      const { body, eventStream } = request.junction
      if (body) finished(body, () => logRequest(request, reply))
      else if (eventStream) void eventStream.then(() => logRequest(request, reply))
    })
    if (deps.lifecycle.draining) {
      // Kept-alive clients learn to go elsewhere; /healthz still answers (the process is alive).
      reply.header('connection', 'close')
      if (!request.url.startsWith('/healthz')) {
        done(new GatewayError('shutting_down', 'the gateway is shutting down; retry'))
        return
      }
    }
    done()
  })
}

/**
 * A body that stops arriving, or arrives slower than the floor, is cut: requestTimeoutMs bounds the
 * whole request, this its silences and its trickles. Checked after auth and admission, so only
 * bodies a client was allowed to send are watched.
 */
function watchSlowBodies(app: FastifyInstance, server: ServerConfig): void {
  const bodyWatch = {
    idleMs: server.bodyIdleTimeoutMs,
    minBytesPerSecond: server.bodyMinBytesPerSecond,
    windowMs: server.bodyRateWindowMs,
  }
  app.addHook('preParsing', (request, reply, payload, done) => {
    if (!request.raw.complete) {
      watchBody(request.raw, bodyWatch, (stall) => {
        const message =
          stall.reason === 'idle'
            ? `no byte of the request body arrived for ${stall.ms} ms`
            : `the request body arrived slower than ${server.bodyMinBytesPerSecond} bytes per second (${stall.bytes} bytes in ${stall.ms} ms)`
        request.log.info({ ...stall }, 'request body stalled: connection closed')
        writeRawError(request.raw.socket, new GatewayError('request_timeout', message), request.id)
      })
    }
    done(null, payload)
  })
}

/** The error envelope for every error, and 404 / 405 for paths and methods no route has. */
function setErrorHandlers(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) =>
    sendAfterDeferredAdmission(request, err, (error) => {
      const e = prepareErrorReply(error, request, reply)
      if (e === null) return reply
      return reply.code(e.status).headers(e.headers).send(toErrorBody(e, request.id))
    }),
  )

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0] ?? '/'
    closeIfBodyUnread(request, reply)
    // A known path asked with another method: 405 and the methods it has (RFC 9110 §15.5.6).
    // OPTIONS alone does not make a path known: CORS answers preflights on every /v1 path.
    const allowed = HTTP_METHODS.filter((method) => app.findRoute({ method, url: path }) !== null)
    if (allowed.some((method) => method !== 'OPTIONS')) {
      const e = new GatewayError(
        'method_not_allowed',
        `${request.method} is not allowed on ${path}; it takes ${allowed.join(', ')}`,
      )
      return reply.code(405).header('allow', allowed.join(', ')).send(toErrorBody(e, request.id))
    }
    const e = new GatewayError('route_not_found', `no route for ${request.method} ${path}`)
    return reply.code(404).send(toErrorBody(e, request.id))
  })
}

/**
 * The request's one log line (info) and its metrics, once its answer ended or was cut: from
 * onResponse when the answer was written whole; for a client gone first (Fastify runs no onResponse
 * then), as status 499 once the route is done with it (the generation settled, see trackEachRequest).
 */
function createRequestLogger(deps: Deps): RequestLogger {
  return (request, reply) => {
    // Facts are set by onRequest; a request refused before it (a malformed URL) has none.
    const facts = (request.junction ??= {})
    if (facts.logged) return
    facts.logged = true
    const r = facts.record ?? undefined
    const route = request.routeOptions.url ?? 'unmatched'
    const status = facts.aborted ? 499 : reply.statusCode
    deps.metrics.requests.add(1, route, r?.model ?? '', r?.provider ?? '', status)
    deps.metrics.duration.observeAt(reply.elapsedTime / 1000, route)
    request.log.info(
      {
        method: request.method,
        route,
        status,
        ...(facts.aborted ? { aborted: true } : {}),
        ms: Math.round(reply.elapsedTime * 10) / 10,
        ...(r
          ? {
              generationId: r.generationId,
              model: r.model,
              provider: r.provider,
              promptTokens: r.usage.prompt_tokens,
              completionTokens: r.usage.completion_tokens,
              cost: toUsd(r.cost),
              firstByteMs: r.latencyMs,
              attempts: r.attempts?.length,
            }
          : {}),
        ...(facts.trace ? { traceId: facts.trace.traceId } : {}),
      },
      'request',
    )
  }
}

/** When a request's line is written: at onResponse, or for a client gone first, once the route is done. */
function logEachRequest(app: FastifyInstance, logRequest: RequestLogger): void {
  app.addHook('onResponse', (request, reply, done) => {
    logRequest(request, reply)
    done()
  })
  // A streamed body is remembered: a client gone mid-stream is logged once it has closed.
  // A route still working when its client went is logged when it sends (the error handler's 499).
  app.addHook('onSend', (request, reply, payload, done) => {
    const facts = request.junction
    if (facts?.aborted) logRequest(request, reply)
    else if (facts && isStream(payload)) facts.body = payload
    done(null, payload)
  })
}

/** The route plugins, the one list, each behind its credential. */
async function registerRoutes(app: FastifyInstance, deps: Deps): Promise<void> {
  // The browser console: its session cookie is also a credential of the /v1 and admin routes.
  const consoleConfig = deps.config.console
  const sessions = consoleConfig.enabled
    ? createConsoleSessions({
        store: deps.store,
        adminKey: deps.config.adminKey,
        secret: deriveSessionSecret(consoleConfig.sessionSecret, deps.signingKey),
        ttlMs: consoleConfig.sessionTtlMs,
        signInsPerMinute: consoleConfig.signInsPerMinute,
        now: deps.now,
      })
    : undefined
  if (sessions) await app.register(consoleRoutes, { deps, sessions, assets: loadConsoleAssets() })
  await app.register(healthRoutes, { deps })
  // The OpenAPI document and its rendered page: public, like the API's own documentation.
  await app.register(openapiRoutes)
  // Signed output URLs carry their own authorisation (no bearer header).
  await app.register(outputsRoutes, { deps })
  if (deps.config.adminKey !== undefined) {
    await app.register(adminRoutes, { deps, adminKey: deps.config.adminKey, allow: sessions?.isAdmin })
    await app.register(operatorRoutes, { deps, adminKey: deps.config.adminKey, allow: sessions?.isAdmin })
    await app.register(metricsRoutes, { deps, adminKey: deps.config.adminKey })
  }
  // Anthropic's Messages API: its own auth (x-api-key too) and error shape.
  await app.register(messagesRoutes, { deps })
  // Everything under /v1 and /routed needs an account.
  await app.register(async (api) => {
    api.addHook('onRequest', requireAccountKey(deps.store.accounts, deps.now, sessions?.keyFor))
    await api.register(chatRoutes, { deps })
    await api.register(embeddingsRoutes, { deps })
    await api.register(filesRoutes, { deps })
    await api.register(modelsRoutes, { deps })
    await api.register(accountRoutes, { deps })
    await api.register(keysRoutes, { deps })
    await api.register(predictionsRoutes, { deps })
    await api.register(responsesRoutes, { deps })
    await api.register(reportsRoutes, { deps })
  })
}

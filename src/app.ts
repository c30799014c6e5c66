import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify'
import { authenticate } from './auth.ts'
import type { Deps } from './deps.ts'
import { GatewayError, toErrorBody, toGatewayError } from './errors.ts'
import { accountRoutes } from './routes/account.ts'
import { adminRoutes } from './routes/admin.ts'
import { chatRoutes } from './routes/chat.ts'
import { embeddingsRoutes } from './routes/embeddings.ts'
import { filesRoutes } from './routes/files.ts'
import { healthRoutes } from './routes/health.ts'
import { modelsRoutes } from './routes/models.ts'

const requestIdPattern = /^[0-9a-f]{32}$/

/** Builds the HTTP app. Never listens: server.ts does, tests use inject or listen on port 0. */
export async function buildApp(deps: Deps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: deps.config.server.bodyLimitBytes,
    keepAliveTimeout: deps.config.server.keepAliveTimeoutMs,
    // A caller's own request id is kept when it has our form, so logs of both sides line up.
    genReqId: (req) => {
      const given = req.headers['x-request-id']
      return typeof given === 'string' && requestIdPattern.test(given) ? given : deps.ids.request()
    },
    // The drain check below answers with the error envelope instead.
    return503OnClosing: false,
    routerOptions: { ignoreTrailingSlash: true },
  })
  app.decorateRequest('account', null as never)
  // Every body the API takes is JSON (multipart is added per route); plain text is a 415.
  app.removeContentTypeParser('text/plain')

  // Callback style: this runs on every request, and a sync hook costs no promise.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    if (deps.lifecycle.draining && !request.url.startsWith('/healthz')) {
      reply.header('connection', 'close')
      done(new GatewayError('shutting_down', 'the gateway is shutting down; retry'))
      return
    }
    done()
  })

  app.setErrorHandler((err, request, reply) => {
    const e = toGatewayError(err)
    if (reply.raw.destroyed) {
      // The client went away first (its abort cancelled the upstream call): nobody to answer, no fault.
      request.log.info('client closed the connection before the answer')
      return reply.code(499).send()
    }
    if (e.status >= 500) request.log.error({ err, status: e.status, code: e.code }, 'request failed')
    else request.log.info({ status: e.status, code: e.code, param: e.param }, 'request rejected')
    return reply.code(e.status).headers(e.headers).send(toErrorBody(e, request.id))
  })

  app.setNotFoundHandler((request, reply) => {
    const e = new GatewayError(
      'route_not_found',
      `no route for ${request.method} ${request.url.split('?')[0]}`,
    )
    return reply.code(404).send(toErrorBody(e, request.id))
  })

  await app.register(healthRoutes, { deps })
  if (deps.config.adminKey !== undefined) {
    await app.register(adminRoutes, { deps, adminKey: deps.config.adminKey })
  }
  // Everything under /v1 and /routed needs an account.
  await app.register(async (api) => {
    api.addHook('onRequest', async (request) => {
      request.account = await authenticate(request, deps.store.accounts)
    })
    await api.register(chatRoutes, { deps })
    await api.register(embeddingsRoutes, { deps })
    await api.register(filesRoutes, { deps })
    await api.register(modelsRoutes, { deps })
    await api.register(accountRoutes, { deps })
  })
  return app
}

import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'

export const healthRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  // Liveness: the process answers.
  app.get('/healthz', async () => ({ status: 'ok' }))

  // Readiness: the store answers and the gateway is not draining.
  app.get('/readyz', async () => {
    try {
      await deps.store.ping()
    } catch (err) {
      throw new GatewayError('store_unavailable', 'the state store is unreachable', { cause: err })
    }
    return { status: 'ready' }
  })
}

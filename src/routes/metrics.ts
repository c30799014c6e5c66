import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'
import { requireAdminKey } from '../auth/index.ts'

// GET /metrics: the Prometheus text format, for the operator's scraper with the admin key as its
// bearer token (Prometheus `authorization: {credentials: …}`); never for account keys, and absent
// (404) when no admin key is configured.
export const metricsRoutes: FastifyPluginAsync<{ deps: Deps; adminKey: string }> = async (
  app,
  { deps, adminKey },
) => {
  app.addHook('onRequest', requireAdminKey(adminKey))
  app.get('/metrics', async (_request, reply) => {
    const text = await deps.metrics.registry.metrics()
    return reply.header('content-type', deps.metrics.registry.contentType).send(text)
  })
}

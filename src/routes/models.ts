import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'

export const modelsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const created = Math.floor(deps.now() / 1000)
  // The list only changes with the config, so it is built once.
  const body = {
    object: 'list' as const,
    data: deps.router.models().map((m) => ({
      id: m.slug,
      object: 'model' as const,
      created,
      owned_by: m.provider,
      type: m.type,
    })),
  }
  app.get('/v1/models', async () => body)
  app.get('/routed/v1/models', async () => body)
}

import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import { toPricing } from '../schemas/models.ts'

export const modelsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const created = Math.floor(deps.now() / 1000)
  // The list only changes with the config, so it is built once.
  const body = {
    object: 'list' as const,
    data: deps.router.models().map((m) => {
      // The first deployment is the one tried first: its provider and price are the model's own.
      const d = m.deployments[0]
      return {
        id: m.slug,
        object: 'model' as const,
        created,
        owned_by: d?.provider ?? m.slug.split('/')[0],
        type: m.type,
        // Media models: the input rules their predictions follow (docs/clients/predictions.md).
        ...(m.family ? { input_family: m.family } : {}),
        pricing: d?.priced ? toPricing(d.price.table) : null,
        ...(m.aliases?.length ? { aliases: m.aliases } : {}),
      }
    }),
  }
  const bySlug = new Map(body.data.map((m) => [m.id, m]))
  // Any key of the account may read the list, a management key too.
  const any = { config: { keys: 'any' as const } }
  app.get('/v1/models', any, async () => body)
  app.get('/routed/v1/models', any, async () => body)
  // A slug has a `/` in it (`openai/gpt-4o`), hence the wildcard. An alias answers its model's object.
  const one = async (request: FastifyRequest) => {
    const id = (request.params as { '*': string })['*']
    const model = deps.models.get(id)
    const found = model === undefined ? undefined : bySlug.get(model.slug)
    if (found === undefined) {
      throw new GatewayError('model_not_found', `model ${JSON.stringify(id)} does not exist`, {
        param: 'model',
      })
    }
    return found
  }
  app.get('/v1/models/*', any, one)
  app.get('/routed/v1/models/*', any, one)
}

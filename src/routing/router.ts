import type { Config, ModelType, ResolvedModel } from '../config.ts'
import { GatewayError } from '../errors.ts'
import type { Provider, ProviderRegistry } from '../providers/registry.ts'

export interface Route {
  model: ResolvedModel
  provider: Provider
}

export interface Router {
  /** The provider that serves `slug`; 404 for an unknown slug, 400 for a model of another type. */
  resolve(slug: string, type: ModelType): Route
  models(): readonly ResolvedModel[]
}

export function createRouter(config: Config, registry: ProviderRegistry): Router {
  const bySlug = new Map(config.models.map((m) => [m.slug, m]))
  return {
    resolve(slug, type) {
      const model = bySlug.get(slug)
      if (!model) {
        throw new GatewayError('model_not_found', `model ${JSON.stringify(slug)} does not exist`, {
          param: 'model',
        })
      }
      if (model.type !== type) {
        throw new GatewayError(
          'invalid_value',
          `model ${slug} is a ${model.type} model, not a ${type} model`,
          {
            param: 'model',
          },
        )
      }
      const provider = registry.get(model.provider)
      if (!provider) {
        throw new GatewayError('no_available_provider', `no provider is configured for ${slug}`)
      }
      return { model, provider }
    },
    models: () => config.models,
  }
}

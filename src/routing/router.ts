import type { ModelType } from '../config.ts'
import { GatewayError } from '../errors.ts'
import type { Provider, ProviderRegistry } from '../providers/registry.ts'
import type { Deployment, ModelTable, ServedModel } from './model-table.ts'

/** A deployment ready to call: its price and upstream model, and the provider's adapter and pool. */
export interface Candidate {
  deployment: Deployment
  provider: Provider
}

export interface Route {
  model: ServedModel
  /** In the order to try them; the first that answers serves (and prices) the request. */
  candidates: Candidate[]
}

export interface Router {
  /** 404 for an unknown slug, 400 for a model of another type, 503 when no deployment has a provider. */
  route(slug: string, type: ModelType): Route
  models(): readonly ServedModel[]
}

export function createRouter(table: ModelTable, registry: ProviderRegistry): Router {
  return {
    route(slug, type) {
      const model = table.get(slug)
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
      const candidates: Candidate[] = []
      for (const deployment of model.deployments) {
        const provider = registry.get(deployment.provider)
        if (provider) candidates.push({ deployment, provider })
      }
      if (candidates.length === 0) {
        throw new GatewayError('no_available_provider', `no provider is configured for ${slug}`)
      }
      return { model, candidates }
    },
    models: () => table.list(),
  }
}

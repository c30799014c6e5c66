import type { MediaFamily } from './media.ts'
import type { CompiledPrice } from './prices.ts'

// Models and who serves them: what a model is for, the provider kinds, and the deployments the model
// table (routing/model-table.ts) builds from the catalogue and the config file.

/** `replicate` serves predictions only (image and video models); the others chat too. */
export type ProviderKind = 'openai-compat' | 'anthropic' | 'gemini' | 'replicate' | 'mock'

/** One provider serving a model: where a request goes and what it costs there. */
export interface Deployment {
  /** Unique within the model: `<provider>` or, for a second deployment on the same provider, `<provider>#<n>`. */
  id: string
  /** The model slug it serves (the answer's `model` and the record's, when it answers). */
  slug: string
  provider: string
  upstreamModel: string
  price: CompiledPrice
  /** False when neither the config nor the price list gives a price (it is then billed at 0). */
  priced: boolean
  weight: number
  /** Configured quality score (0–100), if any. */
  quality?: number
}

/** How a model's deployments are ordered when a request does not say. */
export type RoutingType = 'priority' | 'round_robin' | 'least_latency'

export interface ServedModel {
  slug: string
  type: ModelType
  /** The configured order of its deployments: priority unless the config file says otherwise. */
  strategy: RoutingType
  /** Most output tokens one answer can have; the reservation's bound when the client sets none. */
  maxOutputTokens?: number
  /** Image, video and speech models: the input rules their predictions follow. */
  family?: MediaFamily
  /** Other names requests may use for it (the config file's `aliases`). */
  aliases?: readonly string[]
  /** In configured priority order; never empty. */
  deployments: readonly Deployment[]
}

export type ModelType = 'chat' | 'embedding' | 'image' | 'video' | 'speech'

import { GatewayError } from '../errors.ts'
import type { ChatProvider, MediaProvider, Provider, ProviderRegistry } from '../providers/registry.ts'
import { healthKey, type Health } from './health.ts'
import type { ModelTable } from './model-table.ts'
import type { Deployment, ModelType, RoutingType, ServedModel } from '../domain/models.ts'

// (slug, routing extensions, health) → the deployments to try, in order. The ordering functions are
// pure (their state, round-robin counters and latencies, is passed in); `createRouter` holds that
// state for one process.

/**
 * A deployment ready to call: its price and upstream model, and the provider's capability and pool.
 * `P` is what the provider must be able to do: chat (chat and embeddings routes) or media (predictions).
 */
export interface Candidate<P extends Provider = ChatProvider> {
  model: ServedModel
  deployment: Deployment
  provider: P
  /** Key of the deployment in health and round-robin state. */
  key: string
}

/** A deployment that can take a prediction task. */
export type MediaCandidate = Candidate<MediaProvider>

export interface Route {
  /** The first model of the plan: the one asked for, or model_routing_config's pick. */
  model: ServedModel
  /** Every model the plan may answer with, in order (the pick, the others, then the fallback). */
  models: ServedModel[]
  /** In the order to try them; the first that answers serves (and prices) the request. */
  candidates: Candidate[]
}

export type { RoutingType }
export type PrimaryFactor = 'cost' | 'speed' | 'quality'

/** docs/design/api-contract.md's `provider` extension. */
export interface ProviderRouting {
  routing: { type: RoutingType; primary_factor?: PrimaryFactor; providers: string[] }
  fallback?: string
}

/** docs/design/api-contract.md's `model_routing_config` extension. */
export interface ModelRoutingConfig {
  available_models: string[]
  preference?: string
  task_info?: { task_type?: 'chat' | 'completion' | 'embedding'; complexity?: 'low' | 'medium' | 'high' }
}

export interface RouteRequest {
  slug: string
  type: ModelType
  provider?: ProviderRouting
  modelRouting?: ModelRoutingConfig
}

export interface Router {
  /**
   * 404 for an unknown slug, 400 for a model of another type or an extension naming what does not
   * serve the model, 503 when every deployment is unconfigured or taken out of rotation.
   */
  route(request: RouteRequest): Route
  /**
   * A media model's deployments that can take a prediction, in its configured order (priority,
   * round_robin or least_latency, as for chat), without those whose breaker is open. 503 when none is
   * configured with a media-capable provider or every one is out of rotation.
   */
  routeMedia(model: ServedModel): MediaCandidate[]
  /**
   * Every media-capable deployment of `model` in its configured order (least_latency: by latency;
   * round_robin keeps the configured order, its rotation advances only in `routeMedia`), breakers not
   * consulted: the runner's list for moving a task no upstream has accepted yet.
   */
  mediaCandidates(model: ServedModel): MediaCandidate[]
  models(): readonly ServedModel[]
}

/** What ordering reads: measured latencies and the round-robin state. */
export interface OrderingState {
  latency(key: string): number | undefined
  /** Smooth weighted round-robin: the running weight of each member, per rotation group. */
  rotations: Map<string, Map<string, number>>
}

export function createRouter(table: ModelTable, registry: ProviderRegistry, health: Health): Router {
  const state: OrderingState = { latency: (k) => health.latency(k), rotations: new Map() }
  const lookup = (slug: string, type: ModelType, param: string): ServedModel => {
    const model = table.get(slug)
    if (!model) {
      throw new GatewayError('model_not_found', `model ${JSON.stringify(slug)} does not exist`, { param })
    }
    if (model.type !== type) {
      throw new GatewayError('invalid_value', `model ${slug} is a ${model.type} model, not a ${type} model`, {
        param,
      })
    }
    return model
  }
  /** The deployments whose provider has the capability `has` asks for. */
  function candidatesWith<P extends Provider>(
    model: ServedModel,
    deployments: readonly Deployment[],
    has: (p: Provider) => p is P,
  ): Candidate<P>[] {
    const out: Candidate<P>[] = []
    for (const deployment of deployments) {
      const provider = registry.get(deployment.provider)
      if (provider && has(provider)) {
        out.push({ model, deployment, provider, key: healthKey(model.slug, deployment.id) })
      }
    }
    return out
  }
  const candidatesOf = (model: ServedModel, deployments: readonly Deployment[]): Candidate[] =>
    candidatesWith(model, deployments, chats)
  const outOfRotation = (slug: string) =>
    new GatewayError(
      'no_available_provider',
      `every provider of ${slug} is out of rotation after repeated failures; retry later`,
      { headers: { 'retry-after': '1' } },
    )

  return {
    route(r) {
      const primary = r.modelRouting ? pickModels(r, lookup, state) : [lookup(r.slug, r.type, 'model')]
      const planned: Candidate[] = []
      const models: ServedModel[] = []
      const listed = r.provider?.routing.providers
      if (listed) checkListedProviders(listed, primary)
      for (const model of primary) {
        const kept = listed
          ? model.deployments.filter((d) => listed.includes(d.provider) || listed.includes(d.id))
          : model.deployments
        if (kept.length === 0) continue
        const type = r.provider?.routing.type ?? model.strategy
        const ordered = orderDeployments(
          candidatesOf(model, kept),
          { type, primaryFactor: r.provider?.routing.primary_factor, providers: listed },
          state,
        )
        if (ordered.length > 0) models.push(model)
        planned.push(...ordered)
      }
      const fallbackSlug = r.provider?.fallback
      if (fallbackSlug !== undefined) {
        const fallback = lookup(fallbackSlug, r.type, 'provider.fallback')
        if (!primary.includes(fallback)) {
          const ordered = orderDeployments(
            candidatesOf(fallback, fallback.deployments),
            { type: fallback.strategy },
            state,
          )
          if (ordered.length > 0) models.push(fallback)
          planned.push(...ordered)
        }
      }
      const first = primary[0] as ServedModel
      if (planned.length === 0) {
        throw new GatewayError('no_available_provider', `no provider is configured for ${first.slug}`)
      }
      const candidates = planned.filter((c) => health.isAvailable(c.key))
      if (candidates.length === 0) throw outOfRotation(first.slug)
      return { model: first, models, candidates }
    },
    routeMedia(model) {
      const planned = orderDeployments(
        candidatesWith(model, model.deployments, makesMedia),
        { type: model.strategy },
        state,
      )
      if (planned.length === 0) {
        throw new GatewayError(
          'no_available_provider',
          `no configured provider serves ${model.slug} predictions`,
        )
      }
      const candidates = planned.filter((c) => health.isAvailable(c.key))
      if (candidates.length === 0) throw outOfRotation(model.slug)
      return candidates
    },
    mediaCandidates(model) {
      const type = model.strategy === 'round_robin' ? 'priority' : model.strategy
      return orderDeployments(candidatesWith(model, model.deployments, makesMedia), { type }, state)
    },
    models: () => table.list(),
  }
}

const chats = (p: Provider): p is ChatProvider => p.adapter !== undefined
const makesMedia = (p: Provider): p is MediaProvider => p.media !== undefined

function checkListedProviders(listed: string[], models: readonly ServedModel[]): void {
  listed.forEach((name, i) => {
    const serves = models.some((m) => m.deployments.some((d) => d.provider === name || d.id === name))
    if (!serves) {
      throw new GatewayError(
        'invalid_value',
        `provider ${JSON.stringify(name)} does not serve ${models.map((m) => m.slug).join(', ')}`,
        { param: `provider.routing.providers[${i}]` },
      )
    }
  })
}

export interface Ordering {
  type: RoutingType
  primaryFactor?: PrimaryFactor
  /** The request's providers list: `priority` follows its order. */
  providers?: string[]
}

/**
 * One model's candidates in the order to try them. `type` orders them (priority: the request's list,
 * else the configured order; round_robin: smooth weighted rotation, even when weights are equal;
 * least_latency: lowest moving-average time to first byte, never-measured first so each gets
 * measured); `primaryFactor`, when given, sorts before that, keeping the type's order among equals.
 */
export function orderDeployments<C extends { deployment: Deployment; key: string }>(
  candidates: C[],
  o: Ordering,
  state: OrderingState,
): C[] {
  let out = [...candidates]
  if (o.type === 'priority' && o.providers) {
    const rank = (c: C): number => {
      const byId = o.providers?.indexOf(c.deployment.id) ?? -1
      return byId >= 0 ? byId : (o.providers?.indexOf(c.deployment.provider) ?? -1)
    }
    out = stableSort(out, (a, b) => rank(a) - rank(b))
  } else if (o.type === 'round_robin' && out.length > 1) {
    out = rotate(out, state.rotations)
  } else if (o.type === 'least_latency') {
    out = stableSort(out, (a, b) => byLatency(state.latency(a.key), state.latency(b.key)))
  }
  if (o.primaryFactor === 'cost') {
    out = stableSort(out, (a, b) => compareBig(unitPrice(a.deployment), unitPrice(b.deployment)))
  } else if (o.primaryFactor === 'speed') {
    out = stableSort(out, (a, b) => byLatency(state.latency(a.key), state.latency(b.key)))
  } else if (o.primaryFactor === 'quality') {
    out = stableSort(out, (a, b) => (b.deployment.quality ?? -1) - (a.deployment.quality ?? -1))
  }
  return out
}

/**
 * Smooth weighted round-robin (as nginx does it): each member gains its weight, the highest goes first
 * and pays back the total. Over any run of requests each member's share follows its weight, without
 * bursts; the rest follow in their rotation order as retry candidates.
 */
function rotate<C extends { deployment: Deployment; key: string }>(
  candidates: C[],
  rotations: Map<string, Map<string, number>>,
): C[] {
  const group = candidates.map((c) => c.key).join(',')
  let running = rotations.get(group)
  if (!running) {
    running = new Map()
    rotations.set(group, running)
  }
  let total = 0
  let best = 0
  candidates.forEach((c, i) => {
    const w = (running.get(c.key) ?? 0) + c.deployment.weight
    running.set(c.key, w)
    total += c.deployment.weight
    if (w > (running.get((candidates[best] as C).key) ?? 0)) best = i
  })
  const chosen = candidates[best] as C
  running.set(chosen.key, (running.get(chosen.key) ?? 0) - total)
  return [...candidates.slice(best), ...candidates.slice(0, best)]
}

/** Never measured (undefined) sorts first, then the fastest. */
function byLatency(a: number | undefined, b: number | undefined): number {
  if (a === undefined) return b === undefined ? 0 : -1
  if (b === undefined) return 1
  return a - b
}

/** A deployment's price for one prompt and one output token (embedding: one input token). */
function unitPrice(d: Deployment): bigint {
  return d.price.prompt + d.price.completion
}

const compareBig = (a: bigint, b: bigint): number => (a < b ? -1 : a > b ? 1 : 0)

function stableSort<T>(items: T[], compare: (a: T, b: T) => number): T[] {
  return items
    .map((item, i) => ({ item, i }))
    .sort((a, b) => compare(a.item, b.item) || a.i - b.i)
    .map((x) => x.item)
}

/**
 * model_routing_config: the available models in the order to use them. `preference` (cost, speed,
 * quality, or one of the slugs) decides first; `task_info.complexity` orders among equals (low:
 * cheapest then fastest; high: best quality; medium: as listed). The request's own `model` comes last
 * when it is not among them.
 */
function pickModels(
  r: RouteRequest,
  lookup: (slug: string, type: ModelType, param: string) => ServedModel,
  state: OrderingState,
): ServedModel[] {
  const cfg = r.modelRouting as ModelRoutingConfig
  const taskType = cfg.task_info?.task_type
  if (taskType !== undefined && (taskType === 'embedding') !== (r.type === 'embedding')) {
    throw new GatewayError('invalid_value', `task_type ${taskType} does not match a ${r.type} request`, {
      param: 'model_routing_config.task_info.task_type',
    })
  }
  if (cfg.available_models.length === 0) {
    throw new GatewayError('invalid_value', 'available_models must name at least one model', {
      param: 'model_routing_config.available_models',
    })
  }
  const models: ServedModel[] = []
  cfg.available_models.forEach((slug, i) => {
    const m = lookup(slug, r.type, `model_routing_config.available_models[${i}]`)
    if (!models.includes(m)) models.push(m)
  })
  const pref = cfg.preference
  if (pref !== undefined && !['cost', 'speed', 'quality'].includes(pref)) {
    if (!cfg.available_models.includes(pref)) {
      throw new GatewayError(
        'invalid_value',
        `preference must be cost, speed, quality or one of available_models, not ${JSON.stringify(pref)}`,
        { param: 'model_routing_config.preference' },
      )
    }
  }
  const ranked = rankModels(models, pref, cfg.task_info?.complexity, state)
  const asked = lookup(r.slug, r.type, 'model')
  if (!ranked.includes(asked)) ranked.push(asked)
  return ranked
}

/** Pure: `models` ordered by preference, then complexity, then as given. */
export function rankModels(
  models: ServedModel[],
  preference: string | undefined,
  complexity: 'low' | 'medium' | 'high' | undefined,
  state: Pick<OrderingState, 'latency'>,
): ServedModel[] {
  const cost = (m: ServedModel): bigint =>
    m.deployments.reduce(
      (min, d) => (unitPrice(d) < min ? unitPrice(d) : min),
      unitPrice(m.deployments[0] as Deployment),
    )
  const latency = (m: ServedModel): number | undefined => {
    let best: number | undefined
    for (const d of m.deployments) {
      const l = state.latency(healthKey(m.slug, d.id))
      if (l !== undefined && (best === undefined || l < best)) best = l
    }
    return best
  }
  const quality = (m: ServedModel): number => Math.max(-1, ...m.deployments.map((d) => d.quality ?? -1))
  const byCost = (a: ServedModel, b: ServedModel) => compareBig(cost(a), cost(b))
  const bySpeed = (a: ServedModel, b: ServedModel) => byLatency(latency(a), latency(b))
  // Without a configured score, the dearer model is taken as the stronger one.
  const byQuality = (a: ServedModel, b: ServedModel) =>
    quality(b) - quality(a) || compareBig(cost(b), cost(a))
  let out = [...models]
  if (complexity === 'low') out = stableSort(out, (a, b) => byCost(a, b) || bySpeed(a, b))
  else if (complexity === 'high') out = stableSort(out, byQuality)
  if (preference === 'cost') out = stableSort(out, byCost)
  else if (preference === 'speed') out = stableSort(out, bySpeed)
  else if (preference === 'quality') out = stableSort(out, byQuality)
  else if (preference !== undefined) {
    out = stableSort(out, (a, b) => Number(b.slug === preference) - Number(a.slug === preference))
  }
  return out
}

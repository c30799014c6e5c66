import { builtinPrices } from '../billing/price-list.ts'
import { compilePrice } from '../billing/prices.ts'
import type { ProvidersConfig } from '../providers/config.ts'
import type { ModelConfig } from './config.ts'
import { builtinModels } from '../providers/catalogue.ts'
import type { Deployment, ServedModel } from '../domain/models.ts'

// slug → the deployments that serve it. Built once in createDeps from the built-in catalogue (models
// of the enabled providers), the built-in price list and the config file's models, which replace a
// catalogue entry of the same slug.

export interface ModelTable {
  /** The model a request names: by its slug or by one of its aliases. */
  get(name: string): ServedModel | undefined
  /** Every model, catalogue order first, then the config file's new slugs. */
  list(): readonly ServedModel[]
}

/** The config slices the table is built from: the file's models and the enabled providers. */
export interface ModelTableConfig {
  models: readonly ModelConfig[]
  providers: ProvidersConfig
}

export function buildModelTable(config: ModelTableConfig): ModelTable {
  const bySlug = new Map<string, ServedModel>()
  // A catalogue alias yields to the config file: a name it gives a model, as a slug or an alias.
  const taken = new Set(config.models.flatMap((m) => [m.slug, ...m.aliases]))
  for (const m of builtinModels) {
    if (!config.providers[m.provider]) continue
    const table = builtinPrices[m.slug]
    bySlug.set(m.slug, {
      slug: m.slug,
      type: m.type,
      strategy: 'priority',
      maxOutputTokens: m.maxOutputTokens,
      family: m.family,
      aliases: m.aliases?.filter((a) => !taken.has(a)),
      deployments: [
        {
          id: m.provider,
          slug: m.slug,
          provider: m.provider,
          upstreamModel: m.upstreamModel,
          price: compilePrice(table ?? {}),
          priced: table !== undefined,
          weight: 1,
        },
      ],
    })
  }
  for (const m of config.models) {
    const seen = new Map<string, number>()
    const deployments = m.deployments.map((d): Deployment => {
      const n = seen.get(d.provider) ?? 0
      seen.set(d.provider, n + 1)
      // A deployment's own price; else the list price of the provider's own slug for that upstream model.
      const table = d.pricing ?? builtinPrices[m.slug] ?? builtinPrices[`${d.provider}/${d.upstreamModel}`]
      return {
        id: n === 0 ? d.provider : `${d.provider}#${n + 1}`,
        slug: m.slug,
        provider: d.provider,
        upstreamModel: d.upstreamModel,
        price: compilePrice(table ?? {}),
        priced: table !== undefined,
        weight: d.weight,
        quality: d.quality ?? m.quality,
      }
    })
    bySlug.set(m.slug, {
      slug: m.slug,
      type: m.type,
      strategy: m.routing ?? 'priority',
      maxOutputTokens: m.maxOutputTokens,
      family: m.family,
      // Overriding a catalogue model keeps its bare vendor name, unless the config gave that away.
      aliases: [...m.aliases, ...(bySlug.get(m.slug)?.aliases ?? [])],
      deployments,
    })
  }
  const list = [...bySlug.values()]
  const byAlias = indexAliases(list)
  return { get: (name) => resolveModelName(name, bySlug, byAlias), list: () => list }
}

/** An alias naming two models, or a model's slug: the config cannot start. */
export class ModelNameConflict extends Error {}

/** alias → model. Throws ModelNameConflict when an alias is a slug or belongs to two models. */
function indexAliases(models: readonly ServedModel[]): Map<string, ServedModel> {
  const slugs = new Set(models.map((m) => m.slug))
  const byAlias = new Map<string, ServedModel>()
  for (const m of models) {
    for (const alias of m.aliases ?? []) {
      if (slugs.has(alias)) {
        throw new ModelNameConflict(`models: alias "${alias}" of ${m.slug} is the slug of a model`)
      }
      const other = byAlias.get(alias)
      if (other !== undefined && other !== m) {
        throw new ModelNameConflict(`models: alias "${alias}" is given to both ${other.slug} and ${m.slug}`)
      }
      byAlias.set(alias, m)
    }
  }
  return byAlias
}

/**
 * The one place a name a request sends becomes a model: a slug first, else an alias. Every route
 * (chat, embeddings, predictions, the other dialects) reaches models through ModelTable.get.
 */
function resolveModelName(
  name: string,
  bySlug: ReadonlyMap<string, ServedModel>,
  byAlias: ReadonlyMap<string, ServedModel>,
): ServedModel | undefined {
  return bySlug.get(name) ?? byAlias.get(name)
}

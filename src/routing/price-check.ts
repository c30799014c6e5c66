import { CHARGED_PRICES } from '../billing/prices.ts'
import { reportedUnits } from '../providers/usage-units.ts'
import type { ModelTable } from './model-table.ts'
import type { MediaFamily } from '../domain/media.ts'
import type { ModelType, ProviderKind } from '../domain/models.ts'
import type { PriceField, PriceTable, UsageUnit } from '../domain/prices.ts'

// "Every configured price is charged": at start, each deployment's price table is held against what
// its provider kind's adapter reports (providers/usage-units.ts). A price the model is never charged,
// a price in a unit the adapter does not report, or a unit reported with no price (billed $0) refuses
// to start, naming the model and the price. A deployment without a price (or with an empty table) is
// free by choice: it is only logged (deps.ts).

const UNIT_NAMES: Record<UsageUnit, string> = {
  input_tokens: 'input tokens',
  output_tokens: 'output tokens',
  images: 'images',
  video_seconds: 'seconds of video',
  characters: 'characters',
  audio_tokens: 'audio tokens',
}

/** Types charged in any one of their units (speech: per character, per audio token, or both). */
const ANY_UNIT: readonly ModelType[] = ['speech']

export interface PricedDeployment {
  slug: string
  type: ModelType
  family?: MediaFamily
  provider: string
  kind: ProviderKind
  table: PriceTable
}

const isSet = (t: PriceTable, f: PriceField): boolean => {
  const v = t[f]
  return v !== undefined && (typeof v === 'number' || Object.keys(v).length > 0)
}

/**
 * What is wrong with one deployment's price table: one clause a problem (the model is named by the
 * caller), empty when it is sound.
 */
export function priceProblems(
  d: PricedDeployment,
  reported: readonly UsageUnit[] | undefined = reportedUnits(d.kind, d.type, d.family),
): string[] {
  const set = (Object.keys(d.table) as PriceField[]).filter((f) => d.table[f] !== undefined)
  if (set.length === 0) return []
  const kindOf = d.family !== undefined && d.family !== d.type ? `${d.type} (${d.family})` : d.type
  if (reported === undefined) {
    return [`${d.kind} serves no ${kindOf} models, so its price (${set.join(', ')}) is never charged`]
  }
  const charged = CHARGED_PRICES[d.type]
  const problems: string[] = []
  // The prices to name for some units (stand-ins left out), and every price that bills them.
  const priceFor = (units: readonly UsageUnit[]) =>
    charged.filter((c) => c.base && !c.unless && units.includes(c.unit)).map((c) => c.field)
  const billing = (units: readonly UsageUnit[]) =>
    charged.filter((c) => c.base && units.includes(c.unit)).map((c) => c.field)
  for (const field of set) {
    const c = charged.find((x) => x.field === field)
    if (!c) {
      problems.push(
        `${field} is not a price of ${d.type} models (they are charged ${priceFor(reported).join(', ')})`,
      )
    } else if (c.unless !== undefined && isSet(d.table, c.unless)) {
      problems.push(`${field} is never charged, ${c.unless} is charged instead; remove one`)
    } else if (!reported.includes(c.unit)) {
      problems.push(
        `${field} prices ${UNIT_NAMES[c.unit]}, which ${d.kind} does not report for ${kindOf} models` +
          ` (it reports ${reported.map((u) => UNIT_NAMES[u]).join(' and ')}: price them with ${priceFor(
            reported,
          ).join(' or ')})`,
      )
    }
  }
  const unpriced = (units: readonly UsageUnit[]) => !billing(units).some((f) => isSet(d.table, f))
  const groups = ANY_UNIT.includes(d.type) ? [reported] : reported.map((u) => [u])
  for (const units of groups) {
    if (!unpriced(units)) continue
    problems.push(
      `no ${priceFor(units).join(' or ')} price, so its ${units
        .map((u) => UNIT_NAMES[u])
        .join(' and ')} would be billed $0`,
    )
  }
  return problems
}

/** One line a priced deployment with problems: the model, its provider, and what is wrong. */
export function checkModelPrices(
  models: ModelTable,
  kindOf: (provider: string) => ProviderKind | undefined,
): string[] {
  const problems: string[] = []
  for (const m of models.list()) {
    for (const d of m.deployments) {
      const kind = kindOf(d.provider)
      if (!d.priced || kind === undefined) continue
      const found = priceProblems({
        slug: m.slug,
        type: m.type,
        family: m.family,
        provider: d.provider,
        kind,
        table: d.price.table,
      })
      if (found.length > 0)
        problems.push(`model ${m.slug} on provider ${d.provider} (${kind}): ${found.join('; ')}`)
    }
  }
  return problems
}

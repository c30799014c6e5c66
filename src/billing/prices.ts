import { perUnit, usd } from './money.ts'
import type { ModelType } from '../domain/models.ts'
import type { Money } from '../domain/money.ts'
import type {
  BillableUsage,
  CompiledPrice,
  PricedUsage,
  PriceField,
  PriceTable,
  UsageUnit,
} from '../domain/prices.ts'

/** What each price is given per, as `/v1/models` labels it. */
export const PRICE_UNIT_LABELS: Record<PriceField, string> = {
  prompt: 'per_million_tokens',
  cachedPrompt: 'per_million_tokens',
  cacheWrite: 'per_million_tokens',
  completion: 'per_million_tokens',
  reasoning: 'per_million_tokens',
  audioPrompt: 'per_million_tokens',
  audioCompletion: 'per_million_tokens',
  embedding: 'per_million_tokens',
  imageByTier: 'per_image',
  videoPerSecond: 'per_second',
  speechPerMillionCharacters: 'per_million_characters',
  speechAudioTokens: 'per_million_audio_tokens',
}

/** One price a model of some type is charged: in which unit, and whether that unit bills $0 without it. */
export interface ChargedPrice {
  field: PriceField
  unit: UsageUnit
  /** The unit's base price: without it (or a stand-in), that unit of the usage bills $0. */
  base: boolean
  /** Never charged when this other price is set (it stands in for it). */
  unless?: PriceField
}

/**
 * The prices a model of each type is charged, as priceUsage applies them (compilePrice's fallbacks
 * included): chat per input and output token, with cache, reasoning and audio refinements; embeddings
 * per input token; media per image, per second of video, per character and per audio token.
 */
export const CHARGED_PRICES: Record<ModelType, readonly ChargedPrice[]> = {
  chat: [
    { field: 'prompt', unit: 'input_tokens', base: true },
    { field: 'embedding', unit: 'input_tokens', base: true, unless: 'prompt' },
    { field: 'cachedPrompt', unit: 'input_tokens', base: false },
    { field: 'cacheWrite', unit: 'input_tokens', base: false },
    { field: 'audioPrompt', unit: 'input_tokens', base: false },
    { field: 'completion', unit: 'output_tokens', base: true },
    { field: 'reasoning', unit: 'output_tokens', base: false },
    { field: 'audioCompletion', unit: 'output_tokens', base: false },
  ],
  embedding: [
    { field: 'embedding', unit: 'input_tokens', base: true },
    { field: 'prompt', unit: 'input_tokens', base: true, unless: 'embedding' },
  ],
  image: [{ field: 'imageByTier', unit: 'images', base: true }],
  video: [{ field: 'videoPerSecond', unit: 'video_seconds', base: true }],
  speech: [
    { field: 'speechPerMillionCharacters', unit: 'characters', base: true },
    { field: 'speechAudioTokens', unit: 'audio_tokens', base: true },
  ],
}

const mapValues = (r: Record<string, number> | undefined): Record<string, Money> =>
  Object.fromEntries(Object.entries(r ?? {}).map(([k, v]) => [k, usd(v)]))

export function compilePrice(t: PriceTable): CompiledPrice {
  const prompt = perUnit(t.prompt ?? t.embedding ?? 0)
  const completion = perUnit(t.completion ?? 0)
  return {
    table: t,
    prompt,
    cachedPrompt: t.cachedPrompt === undefined ? prompt : perUnit(t.cachedPrompt),
    cacheWrite: t.cacheWrite === undefined ? prompt : perUnit(t.cacheWrite),
    completion,
    reasoning: t.reasoning === undefined ? completion : perUnit(t.reasoning),
    audioPrompt: t.audioPrompt === undefined ? prompt : perUnit(t.audioPrompt),
    audioCompletion: t.audioCompletion === undefined ? completion : perUnit(t.audioCompletion),
    embedding: t.embedding === undefined ? prompt : perUnit(t.embedding),
    imageByTier: mapValues(t.imageByTier),
    videoPerSecond: mapValues(t.videoPerSecond),
    speechPerCharacter: perUnit(t.speechPerMillionCharacters ?? 0),
    speechAudioToken: perUnit(t.speechAudioTokens ?? 0),
  }
}

const n = (v: unknown): bigint =>
  Number.isFinite(v) && (v as number) > 0 ? BigInt(Math.floor(v as number)) : 0n

/**
 * The upstream cost of a chat usage. OpenAI semantics: prompt_tokens includes cached, cache-write and
 * audio tokens; completion_tokens includes reasoning and audio tokens. Each part is priced once.
 */
export function priceChatUsage(usage: PricedUsage, p: CompiledPrice): Money {
  const pd = usage.prompt_tokens_details ?? {}
  const cd = usage.completion_tokens_details ?? {}
  const cached = n(pd.cached_tokens)
  const cacheWrite = n(pd.cache_write_tokens)
  const audioIn = n(pd.audio_tokens)
  const reasoning = n(cd.reasoning_tokens)
  const audioOut = n(cd.audio_tokens)
  const textIn = max0(n(usage.prompt_tokens) - cached - cacheWrite - audioIn)
  const textOut = max0(n(usage.completion_tokens) - reasoning - audioOut)
  return (
    textIn * p.prompt +
    cached * p.cachedPrompt +
    cacheWrite * p.cacheWrite +
    audioIn * p.audioPrompt +
    textOut * p.completion +
    reasoning * p.reasoning +
    audioOut * p.audioCompletion
  )
}

export function priceEmbeddingUsage(usage: { prompt_tokens: number }, p: CompiledPrice): Money {
  return n(usage.prompt_tokens) * p.embedding
}

const max0 = (v: bigint): bigint => (v < 0n ? 0n : v)

/**
 * The upstream cost of a usage at a price, in picodollars: a pure function of its two arguments.
 * A tier or resolution the table does not list is priced at the table's dearest entry, so a gap
 * in a price list never bills less than the model can cost.
 */
export function priceUsage(u: BillableUsage, p: CompiledPrice): Money {
  switch (u.kind) {
    case 'tokens':
      return priceChatUsage(u.usage, p)
    case 'embedding':
      return priceEmbeddingUsage({ prompt_tokens: u.promptTokens }, p)
    case 'images':
      return n(u.count) * byKey(p.imageByTier, u.tier)
    case 'video': {
      // Per-second prices are per whole second started.
      const seconds = Number.isFinite(u.seconds) && u.seconds > 0 ? BigInt(Math.ceil(u.seconds)) : 0n
      return seconds * byKey(p.videoPerSecond, u.resolution)
    }
    case 'speech':
      return n(u.characters) * p.speechPerCharacter + n(u.audioTokens) * p.speechAudioToken
  }
}

function byKey(prices: Record<string, Money>, key: string): Money {
  const exact = Object.hasOwn(prices, key) ? prices[key] : undefined
  if (exact !== undefined) return exact
  let dearest = 0n
  for (const v of Object.values(prices)) if (v > dearest) dearest = v
  return dearest
}

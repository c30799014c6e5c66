import { PRICE_UNIT_LABELS } from '../billing/prices.ts'
import type { PriceField, PriceTable } from '../domain/prices.ts'

// The `pricing` of a model object, as GET /v1/models and the operator's model list answer it.

/**
 * A model's prices in USD, each labelled with the unit it is given per (`units`): per million tokens,
 * per image (by tier), per second of video (by resolution), per million characters or audio tokens.
 * `unit` is that unit when every price shares it. Defaults are filled in (reasoning at the completion
 * price, an embedding model's price as its prompt price).
 */
export function toPricing(t: PriceTable) {
  const prices: [string, PriceTable[PriceField], PriceField][] = []
  const add = (key: string, value: PriceTable[PriceField], field: PriceField) => {
    if (value !== undefined) prices.push([key, value, field])
  }
  add('prompt', t.prompt ?? t.embedding, t.prompt !== undefined ? 'prompt' : 'embedding')
  if (t.completion !== undefined) {
    add('completion', t.completion, 'completion')
    add('reasoning', t.reasoning ?? t.completion, 'reasoning')
  }
  add('cached_prompt', t.cachedPrompt, 'cachedPrompt')
  add('cache_write', t.cacheWrite, 'cacheWrite')
  add('audio_prompt', t.audioPrompt, 'audioPrompt')
  add('audio_completion', t.audioCompletion, 'audioCompletion')
  add('embedding', t.embedding, 'embedding')
  add('image_per_image', t.imageByTier, 'imageByTier')
  add('video_per_second', t.videoPerSecond, 'videoPerSecond')
  add('speech_per_million_characters', t.speechPerMillionCharacters, 'speechPerMillionCharacters')
  add('speech_audio_tokens', t.speechAudioTokens, 'speechAudioTokens')
  const units = Object.fromEntries(prices.map(([key, , field]) => [key, PRICE_UNIT_LABELS[field]]))
  const distinct = new Set(Object.values(units))
  return {
    currency: 'USD',
    ...(distinct.size === 1 ? { unit: [...distinct][0] } : {}),
    ...Object.fromEntries(prices.map(([key, value]) => [key, value])),
    units,
  }
}

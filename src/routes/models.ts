import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { PRICE_UNIT_LABELS } from '../billing/prices.ts'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import type { PriceField, PriceTable } from '../domain/prices.ts'

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

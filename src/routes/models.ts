import type { FastifyPluginAsync } from 'fastify'
import type { PriceTable } from '../billing/prices.ts'
import type { Deps } from '../deps.ts'

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
        // Media models: the input rules their predictions follow (README, Predictions).
        ...(m.family ? { input_family: m.family } : {}),
        pricing: d?.priced ? toPricing(d.price.table) : null,
      }
    }),
  }
  app.get('/v1/models', async () => body)
  app.get('/routed/v1/models', async () => body)
}

/** Prices as USD per million tokens (per image / per second where so named), with defaults filled in. */
function toPricing(t: PriceTable) {
  const out: Record<string, unknown> = { currency: 'USD', unit: 'per_million_tokens' }
  const prompt = t.prompt ?? t.embedding
  if (prompt !== undefined) out.prompt = prompt
  if (t.completion !== undefined) {
    out.completion = t.completion
    out.reasoning = t.reasoning ?? t.completion
  }
  if (t.cachedPrompt !== undefined) out.cached_prompt = t.cachedPrompt
  if (t.cacheWrite !== undefined) out.cache_write = t.cacheWrite
  if (t.audioPrompt !== undefined) out.audio_prompt = t.audioPrompt
  if (t.audioCompletion !== undefined) out.audio_completion = t.audioCompletion
  if (t.embedding !== undefined) out.embedding = t.embedding
  if (t.imageByTier) out.image_per_image = t.imageByTier
  if (t.videoPerSecond) out.video_per_second = t.videoPerSecond
  if (t.speechPerMillionCharacters !== undefined)
    out.speech_per_million_characters = t.speechPerMillionCharacters
  if (t.speechAudioTokens !== undefined) out.speech_audio_tokens = t.speechAudioTokens
  return out
}

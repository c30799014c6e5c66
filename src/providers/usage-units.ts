import type { MediaFamily } from '../domain/media.ts'
import type { ModelType, ProviderKind } from '../domain/models.ts'
import type { UsageUnit } from '../domain/prices.ts'

// What each provider kind's adapters report a model used, in the units prices are given per. The
// start-up price check (routing/price-check.ts) holds every configured price against this list, so a
// price nothing reports refuses to start instead of billing $0. Keep it in step with the adapters:
// chat and embeddings report OpenAI usage (input and output tokens; embeddings input only); media
// adapters report BillableUsage (async-media/types.ts): images by tier, video seconds, and speech in
// characters and audio tokens alike (async-media/usage.ts).

/** The media families each kind's media adapter serves (providers/registry.ts). */
const MEDIA_FAMILIES: Record<ProviderKind, readonly MediaFamily[]> = {
  'openai-compat': ['image'],
  anthropic: [],
  gemini: ['speech', 'video-a'],
  replicate: ['image', 'video', 'video-b', 'video-c'],
  mock: ['image', 'video', 'speech', 'video-a', 'video-b', 'video-c'],
}

/** Kinds whose adapter answers chat and embeddings (registry.ts: `chat`, `embed`). */
const CHAT: readonly ProviderKind[] = ['openai-compat', 'anthropic', 'gemini', 'mock']
const EMBEDDINGS: readonly ProviderKind[] = ['openai-compat', 'gemini', 'mock']

const MEDIA_UNITS: Record<'image' | 'video' | 'speech', readonly UsageUnit[]> = {
  image: ['images'],
  video: ['video_seconds'],
  speech: ['characters', 'audio_tokens'],
}

/**
 * The units an adapter of `kind` reports for a model of `type` (and media `family`); undefined when the
 * kind does not serve such a model at all.
 */
export function reportedUnits(
  kind: ProviderKind,
  type: ModelType,
  family?: MediaFamily,
): readonly UsageUnit[] | undefined {
  switch (type) {
    case 'chat':
      return CHAT.includes(kind) ? ['input_tokens', 'output_tokens'] : undefined
    case 'embedding':
      return EMBEDDINGS.includes(kind) ? ['input_tokens'] : undefined
    default:
      return family === undefined || MEDIA_FAMILIES[kind].includes(family) ? MEDIA_UNITS[type] : undefined
  }
}

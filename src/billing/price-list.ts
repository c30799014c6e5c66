import type { PriceTable } from '../domain/prices.ts'

/**
 * List prices of the built-in models, USD per million tokens, as each provider published them
 * (standard tier, no batch discount, prompts under any long-context threshold). OpenAI and the
 * OpenAI-compatible providers were taken on PRICES_TAKEN_ON; the Anthropic and Google entries on
 * ANTHROPIC_GOOGLE_PRICES_TAKEN_ON, from stored copies of their pricing pages. Prices change:
 * override them in the config file (`models[].pricing`) rather than trusting this table.
 */
export const PRICES_TAKEN_ON = '2025-10-01'
export const ANTHROPIC_GOOGLE_PRICES_TAKEN_ON = '2026-11-23'

export const builtinPrices: Readonly<Record<string, PriceTable>> = {
  // Small but non-zero, so billing is visible out of the box.
  'mock/chat': { prompt: 1, cachedPrompt: 0.5, completion: 2 },
  'mock/embed': { embedding: 0.1 },
  // Mock media: per image by resolution tier, per second of video by resolution, per million characters.
  'mock/image': { imageByTier: { '1K': 0.01, '2K': 0.02, '4K': 0.04 } },
  'mock/video': { videoPerSecond: { '480P': 0.01, '720P': 0.02, '1080P': 0.04, '4K': 0.08 } },
  'mock/video-a': { videoPerSecond: { '720P': 0.02, '1080P': 0.04, '4K': 0.08 } },
  'mock/video-b': { videoPerSecond: { '480P': 0.01, '720P': 0.02 } },
  'mock/video-c': { videoPerSecond: { '720P': 0.02, '1080P': 0.04 } },
  'mock/speech': { speechPerMillionCharacters: 10 },

  'openai/gpt-5': { prompt: 1.25, cachedPrompt: 0.125, completion: 10 },
  'openai/gpt-5-mini': { prompt: 0.25, cachedPrompt: 0.025, completion: 2 },
  'openai/gpt-5-nano': { prompt: 0.05, cachedPrompt: 0.005, completion: 0.4 },
  'openai/gpt-4.1': { prompt: 2, cachedPrompt: 0.5, completion: 8 },
  'openai/gpt-4.1-mini': { prompt: 0.4, cachedPrompt: 0.1, completion: 1.6 },
  'openai/gpt-4.1-nano': { prompt: 0.1, cachedPrompt: 0.025, completion: 0.4 },
  'openai/gpt-4o': { prompt: 2.5, cachedPrompt: 1.25, completion: 10 },
  'openai/gpt-4o-mini': { prompt: 0.15, cachedPrompt: 0.075, completion: 0.6 },
  'openai/o3': { prompt: 2, cachedPrompt: 0.5, completion: 8 },
  'openai/o4-mini': { prompt: 1.1, cachedPrompt: 0.275, completion: 4.4 },
  'openai/text-embedding-3-small': { embedding: 0.02 },
  'openai/text-embedding-3-large': { embedding: 0.13 },
  // Medium quality, 1024×1024 per image; larger tiers at the 1536-pixel price.
  'openai/gpt-image-1': { imageByTier: { '1K': 0.042, '2K': 0.063 } },

  'groq/llama-3.3-70b-versatile': { prompt: 0.59, completion: 0.79 },
  'groq/llama-3.1-8b-instant': { prompt: 0.05, completion: 0.08 },

  'deepseek/deepseek-chat': { prompt: 0.28, cachedPrompt: 0.028, completion: 0.42 },
  'deepseek/deepseek-reasoner': { prompt: 0.28, cachedPrompt: 0.028, completion: 0.42 },

  'mistral/mistral-large-latest': { prompt: 2, completion: 6 },
  'mistral/mistral-small-latest': { prompt: 0.1, completion: 0.3 },
  'mistral/mistral-embed': { embedding: 0.1 },

  'together/meta-llama/Llama-3.3-70B-Instruct-Turbo': { prompt: 0.88, completion: 0.88 },

  // Anthropic's pricing page: cacheWrite is the 5-minute cache write (1.25× input), cachedPrompt the
  // cache hit (0.1× input). Thinking is billed as output.
  'anthropic/claude-opus-4-6': { prompt: 5, cachedPrompt: 0.5, cacheWrite: 6.25, completion: 25 },
  'anthropic/claude-opus-4-5': { prompt: 5, cachedPrompt: 0.5, cacheWrite: 6.25, completion: 25 },
  'anthropic/claude-sonnet-4-6': { prompt: 3, cachedPrompt: 0.3, cacheWrite: 3.75, completion: 15 },
  'anthropic/claude-sonnet-4-5': { prompt: 3, cachedPrompt: 0.3, cacheWrite: 3.75, completion: 15 },
  'anthropic/claude-haiku-4-5': { prompt: 1, cachedPrompt: 0.1, cacheWrite: 1.25, completion: 5 },

  // Gemini API paid tier, prompts up to 200k tokens; thinking is billed as output.
  'google/gemini-3-pro-preview': { prompt: 2, cachedPrompt: 0.2, completion: 12 },
  'google/gemini-3-flash-preview': { prompt: 0.5, cachedPrompt: 0.05, completion: 3 },
  'google/gemini-2.5-pro': { prompt: 1.25, cachedPrompt: 0.125, completion: 10 },
  'google/gemini-2.5-flash': { prompt: 0.3, cachedPrompt: 0.03, completion: 2.5 },
  'google/gemini-2.5-flash-lite': { prompt: 0.1, cachedPrompt: 0.01, completion: 0.4 },
  'google/gemini-embedding-001': { embedding: 0.15 },
  // Free of charge on the Gemini API.
  'google/text-embedding-004': { embedding: 0 },
  // Speech: output audio tokens (25 a second); Veo 3.1 per second of video with audio.
  'google/gemini-2.5-flash-preview-tts': { speechAudioTokens: 10 },
  'google/gemini-2.5-pro-preview-tts': { speechAudioTokens: 20 },
  'google/veo-3.1-generate-preview': { videoPerSecond: { '720P': 0.4, '1080P': 0.4, '4K': 0.6 } },

  // Replicate bills these models per output: per image, per second of video by resolution.
  'replicate/black-forest-labs/flux-schnell': { imageByTier: { '1K': 0.003 } },
  'replicate/bytedance/seedance-1-lite': { videoPerSecond: { '480P': 0.018, '720P': 0.036 } },
  'replicate/openai/sora-2': { videoPerSecond: { '720P': 0.1, '1080P': 0.1 } },
}

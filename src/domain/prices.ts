import type { Usage } from './chat.ts'
import type { Money } from './money.ts'

// Prices and what is priced: the list prices of the catalogue and the config file, the same compiled
// for exact arithmetic (billing/prices.ts), and a generation's usage in the units prices are given in.

/**
 * A model's list prices as written in the catalogue and the config file: USD per million tokens
 * (or characters), USD per image, USD per second of video. Absent cache/reasoning/audio prices fall
 * back to the plain prompt or completion price.
 */
export interface PriceTable {
  prompt?: number
  cachedPrompt?: number
  cacheWrite?: number
  completion?: number
  reasoning?: number
  audioPrompt?: number
  audioCompletion?: number
  /** Embedding models: per million input tokens. */
  embedding?: number
  /** Per image, by resolution tier (`1K`, `2K`, `standard`, …). */
  imageByTier?: Record<string, number>
  /** Per second of video, by resolution (`720P`, `1080P`, …). */
  videoPerSecond?: Record<string, number>
  /** Speech: per million input characters and per million output audio tokens (either or both). */
  speechPerMillionCharacters?: number
  speechAudioTokens?: number
}

export type PriceField = keyof PriceTable

/** The same prices in picodollars per single unit, ready for exact arithmetic. */
export interface CompiledPrice {
  table: PriceTable
  prompt: Money
  cachedPrompt: Money
  cacheWrite: Money
  completion: Money
  reasoning: Money
  audioPrompt: Money
  audioCompletion: Money
  embedding: Money
  imageByTier: Record<string, Money>
  videoPerSecond: Record<string, Money>
  speechPerCharacter: Money
  speechAudioToken: Money
}

/** The parts of a usage that carry a price. */
export type PricedUsage = Pick<
  Usage,
  | 'prompt_tokens'
  | 'completion_tokens'
  | 'total_tokens'
  | 'prompt_tokens_details'
  | 'completion_tokens_details'
>

/**
 * What one generation used, in the units its price is given in: tokens for chat (OpenAI usage
 * semantics), input tokens for embeddings, images by tier, seconds of video by resolution, and
 * characters or audio tokens for speech.
 */
export type BillableUsage =
  | { kind: 'tokens'; usage: PricedUsage }
  | { kind: 'embedding'; promptTokens: number }
  | { kind: 'images'; count: number; tier: string }
  | { kind: 'video'; seconds: number; resolution: string }
  /** Both units, always: each is charged at its price (absent prices are 0). */
  | { kind: 'speech'; characters: number; audioTokens: number }

/** A unit a usage is counted in. */
export type UsageUnit =
  'input_tokens' | 'output_tokens' | 'images' | 'video_seconds' | 'characters' | 'audio_tokens'

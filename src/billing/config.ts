import { z } from 'zod'
import type { RateLimits } from '../domain/accounts.ts'
import { compilePrice } from './prices.ts'

// Billing's slice of the config: credit reservations and default rate limits (the file's `limits`
// block), and the price table and rate limits the models' and accounts' entries are written in.

export interface LimitsConfig {
  /** How long a reservation holds credits if its request never settles it (crash, hang). */
  reservationTtlMs: number
  /** Output bound used for the reservation when neither the client nor the model gives one. */
  defaultMaxOutputTokens: number
  /** Applied to accounts that set no rate limits of their own. */
  defaultRateLimits: RateLimits
  /** Holds an instance keeps ahead per busy account (billing/spare-holds.ts); 0: none. */
  spareHolds: number
}

export const rateLimitsSchema = z
  .object({
    requestsPerMinute: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Requests admitted per sliding minute (429 past it).'),
    tokensPerMinute: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'Tokens per sliding minute, estimated before the request and corrected by its usage (429 past it).',
      ),
  })
  .strict()

const price = z.number().min(0).max(1_000_000)
export const priceSchema = z
  .object({
    prompt: price.optional().describe('USD per million prompt tokens.'),
    cachedPrompt: price.optional().describe("USD per million prompt tokens read from the provider's cache."),
    cacheWrite: price.optional().describe("USD per million prompt tokens written to the provider's cache."),
    completion: price.optional().describe('USD per million completion tokens.'),
    reasoning: price.optional().describe('USD per million reasoning tokens; `completion` when unset.'),
    audioPrompt: price.optional().describe('USD per million audio prompt tokens.'),
    audioCompletion: price.optional().describe('USD per million audio completion tokens.'),
    embedding: price.optional().describe('USD per million embedding input tokens.'),
    imageByTier: z
      .record(z.string(), price)
      .optional()
      .describe('Image models: USD per image, by resolution tier (`1K`, `2K`, `4K`).'),
    videoPerSecond: z
      .record(z.string(), price)
      .optional()
      .describe('Video models: USD per second of video, by resolution (`720P`, …).'),
    speechPerMillionCharacters: price
      .optional()
      .describe('Speech models: USD per million characters of prompt and style instructions.'),
    speechAudioTokens: price.optional().describe('Speech models: USD per million output audio tokens.'),
  })
  .strict()
  .superRefine((table, ctx) => {
    try {
      compilePrice(table)
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message })
    }
  })

/** The config file's `limits` block. */
export const limitsSchema = z
  .object({
    reservationTtlMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'How long a reservation holds credits if its request never settles it (a crash); renewed while the request runs.',
      ),
    defaultMaxOutputTokens: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'Output bound used for the reservation, and sent upstream, when neither the client nor the model gives one.',
      ),
    rateLimits: rateLimitsSchema.optional().describe('Rate limits of accounts that set none of their own.'),
    spareHolds: z
      .number()
      .int()
      .min(0)
      .max(1024)
      .optional()
      .describe(
        'Credit holds taken ahead per busy account, so its requests need no store call before their upstream call; 0: none.',
      ),
  })
  .strict()
  .default({})
  .describe('Credit reservations and rate limits.')

export function resolveLimits(l: z.infer<typeof limitsSchema>): LimitsConfig {
  return {
    reservationTtlMs: l.reservationTtlMs ?? 15 * 60_000,
    defaultMaxOutputTokens: l.defaultMaxOutputTokens ?? 16_384,
    defaultRateLimits: l.rateLimits ?? {},
    spareHolds: l.spareHolds ?? 32,
  }
}

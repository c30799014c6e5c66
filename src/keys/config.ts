import { z } from 'zod'
import { rateLimitsSchema } from '../billing/config.ts'
import type { Money } from '../domain/money.ts'
import { isWebhookSecret } from '../predictions/webhook-signing.ts'
import { discountRateSchema as rate, overdraftSchema } from '../schemas/billing.ts'
import type { RateLimits } from '../domain/accounts.ts'

// The accounts' slice of the config: the file's `accounts` block (src/config.ts hashes their keys
// and adds the development account when there is none).

export interface AccountKeyConfig {
  /** SHA-256 of the key, lowercase hex. Plain keys from the config file are hashed at load. */
  sha256: string
  /** The first characters of a key given in plain text, for the admin API's listing (as for issued keys). */
  prefix?: string
}

export interface AccountConfig {
  id: string
  name: string
  keys: AccountKeyConfig[]
  /** Credits an account starts with the first time the ledger sees it. */
  initialCredits: Money
  discountPpm: number
  modelDiscountsPpm: Record<string, number>
  rateLimits: RateLimits
  /**
   * The settings the file gives (its others take their defaults above, used only to create the
   * account): only these are applied to an account that already exists.
   */
  given: AccountSetting[]
  /** How far a charge may pass its hold, and the balance go below zero (absent: left as it is, 0 new). */
  overdraft?: Money
  /** The account's webhook signing secret (`whsec_…`), applied at every start; generated when absent. */
  webhookSecret?: string
}

/** The account settings a config file can set, by their AccountConfig names. */
export type AccountSetting = 'name' | 'discountPpm' | 'modelDiscountsPpm' | 'rateLimits'

const hex64 = /^[0-9a-f]{64}$/

const keySchema = z.union([
  z.string().min(8, 'an API key must be at least 8 characters'),
  z.object({ sha256: z.string().regex(hex64, 'must be 64 lowercase hex characters') }).strict(),
])

const accountSchema = z
  .object({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/)
      .describe("The account's id (letters, digits, `_`, `.`, `-`; at most 64)."),
    name: z.string().max(200).optional().describe('A display name; the id when unset.'),
    keys: z
      .array(keySchema)
      .min(1)
      .describe(
        'API keys of the account: a key in plain text (at least 8 characters, hashed at load) or `{"sha256": "<64 hex>"}`.',
      ),
    /** USD the account starts with. */
    credits: z
      .number()
      .min(0)
      .max(1e9)
      .default(0)
      .describe('USD the account starts with, applied only when the account is created.'),
    // No defaults below: an unset field must stay unset, so it is not applied over an existing
    // account's (admin-made) value. The defaults are applied when the account is created.
    /** 0.75 = 75 % off the upstream cost. */
    discountPercent: rate
      .optional()
      .describe('Discount rate on the upstream cost: 0.75 is 75 % off (0 for a new account when unset).'),
    modelDiscounts: z
      .record(z.string(), rate)
      .optional()
      .describe('Discount rates for single models, by slug, over `discountPercent`.'),
    rateLimits: rateLimitsSchema
      .optional()
      .describe("The account's own rate limits; `limits.rateLimits` when unset."),
    /**
     * USD a request may be charged past its hold when the upstream reports more than admission
     * allowed for, and the balance go below zero; 0 (none) unless set.
     */
    overdraftUsd: overdraftSchema
      .optional()
      .describe(
        'USD a charge may pass its hold, and the balance go below zero; 0 for a new account when unset.',
      ),
    /** Standard Webhooks secret signing this account's prediction webhooks. */
    webhookSecret: z
      .string()
      .refine(isWebhookSecret, 'must be whsec_ followed by base64 of 24 to 64 bytes')
      .optional()
      .describe(
        "The Standard Webhooks secret (`whsec_…`) signing the account's prediction webhooks; generated when unset.",
      ),
  })
  .strict()

/** The config file's `accounts` block. */
export const accountsSchema = z
  .array(accountSchema)
  .default([])
  .describe('Accounts applied at every start: created when missing, the fields given applied when changed.')

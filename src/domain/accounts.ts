import type { Money } from './money.ts'

// Accounts and their API keys, as every part of the gateway sees them (the store keeps them; auth,
// billing and the key routes read them).

export interface RateLimits {
  requestsPerMinute?: number
  tokensPerMinute?: number
}

export interface Account {
  id: string
  name: string
  createdAt: number
  /** Discount as parts per million of the upstream cost (750 000 = 75 % off). */
  discountPpm: number
  /** Per-model discounts (slug → ppm), taking precedence over `discountPpm`. */
  modelDiscountsPpm: Record<string, number>
  rateLimits: RateLimits
  /**
   * How far a request may be charged past its hold, and the account's balance go below zero, when the
   * upstream reports more than admission allowed for (picodollars); absent: 0.
   */
  overdraft?: Money
  /** Where and when the account is told of a low balance or a key near its limit; absent: never. */
  notices?: AccountNotices
}

export interface AccountNotices {
  /** The URL signed `balance.low` and `key.limit.low` events are posted to; null: none are sent. */
  url: string | null
  /** `balance.low` is sent when the balance falls to or below this (picodollars); null: never. */
  balanceLow: Money | null
}

/** When a key's spending limit starts over: at 00:00 UTC, each Monday 00:00 UTC, each 1st 00:00 UTC. */
export type LimitReset = 'daily' | 'weekly' | 'monthly'

export interface ApiKeyRecord {
  id: string
  accountId: string
  /** SHA-256 of the key, lowercase hex; the key itself is never stored. */
  hash: string
  /** The first characters of the key, to tell keys apart in listings. */
  prefix: string
  createdAt: number
  // The key's settings. Absent means the default: no name, no limit, never expires, enabled, every
  // model, only the account's rate limits, an inference key.
  name?: string
  /** Spending limit (picodollars, charges after discount) per `limitReset` window; null: none. */
  limit?: Money | null
  /** null: the limit counts every charge since the key was made. */
  limitReset?: LimitReset | null
  /** Unix ms from which the key is refused; null: never. */
  expiresAt?: number | null
  disabled?: boolean
  /** Model slugs or patterns (`anthropic/*`) the key may call; null: every model. */
  allowedModels?: string[] | null
  /** Per-key limits, on top of the account's. */
  rateLimits?: RateLimits
  /** A management key manages its account's keys and reads its usage; it never calls a model. */
  management?: boolean
  /** `key.limit.low` is sent when the limit's remainder falls to or below this (picodollars); null: never. */
  limitLow?: Money | null
  /** Unix ms of the last settings change; null: never changed. */
  updatedAt?: number | null
}

/**
 * What a key has spent (picodollars, charged after discount), counted by `settle` in the same step as
 * the account's charge: every record of the key, and those created in the current UTC day, week
 * (from Monday) and month. `held` is its open reservations.
 */
export interface KeyUsage {
  total: Money
  daily: Money
  weekly: Money
  monthly: Money
  held: Money
}

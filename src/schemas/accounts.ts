import { fromPpm, toUsd } from '../billing/money.ts'
import type { Account, RateLimits } from '../domain/accounts.ts'
import type { Credits } from '../store/types.ts'
import { toHeldCreditsBody } from './billing.ts'
import { toNoticesBody } from './keys.ts'

// An account as its owner (`GET /v1/account`) and the operator (the admin API) see it. Both show the
// same terms; each view adds its own fields around them, in the order its clients have always read.

/** An account's discounts and the rate limits in force: its own, else limits.rateLimits of the config file. */
function toAccountTerms(a: Account, defaults: RateLimits) {
  return {
    discount_percent: fromPpm(a.discountPpm),
    model_discounts: Object.fromEntries(Object.entries(a.modelDiscountsPpm).map(([m, p]) => [m, fromPpm(p)])),
    rate_limits: {
      requests_per_minute: a.rateLimits.requestsPerMinute ?? defaults.requestsPerMinute ?? null,
      tokens_per_minute: a.rateLimits.tokensPerMinute ?? defaults.tokensPerMinute ?? null,
    },
  }
}

/** `GET /v1/account`: the caller's account, its credits with what is held now and what is left to spend. */
export function toAccountBody(a: Account, c: Credits, defaults: RateLimits) {
  return {
    id: a.id,
    object: 'account',
    name: a.name,
    credits: { ...toHeldCreditsBody(c), available: toUsd(c.totalCredits - c.totalUsage - c.reserved) },
    ...toAccountTerms(a, defaults),
  }
}

/** The admin API's body of an account: its settings, limits in force and credits. */
export function toAdminAccountBody(a: Account, c: Credits, defaults: RateLimits) {
  return {
    id: a.id,
    object: 'account',
    name: a.name,
    created_at: Math.floor(a.createdAt / 1000),
    ...toAccountTerms(a, defaults),
    // Which limits are the config file's rather than the account's own.
    rate_limits_inherited: {
      requests_per_minute: a.rateLimits.requestsPerMinute === undefined,
      tokens_per_minute: a.rateLimits.tokensPerMinute === undefined,
    },
    // How far a charge may pass its hold, and the balance go below zero.
    overdraft_usd: toUsd(a.overdraft ?? 0n),
    // Where low-balance and key-limit notices go (docs/keys.md).
    notices: toNoticesBody(a),
    credits: toHeldCreditsBody(c),
  }
}

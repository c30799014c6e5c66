import { z } from 'zod'
import { toPpm, toUsd, usd } from '../billing/money.ts'
import type { Credits } from '../store/types.ts'

/** A discount as a decimal rate (0.75 = 75 % off), exact to parts per million. */
export const discountRateSchema = z
  .number()
  .min(0)
  .max(1)
  .refine((r) => {
    try {
      toPpm(r)
      return true
    } catch {
      return false
    }
  }, 'must be a decimal rate between 0 and 1 with at most 6 decimals')

/**
 * An account's overdraft in USD: how far a charge may pass what admission held, and the balance go
 * below zero, when an upstream reports more than the request's bound. Exact to the picodollar.
 */
export const overdraftSchema = z
  .number()
  .min(0)
  .max(1e9)
  .refine((v) => {
    try {
      usd(v)
      return true
    } catch {
      return false
    }
  }, 'must be a USD amount with at most 12 decimals')

/** An account's credits as `GET /v1/credits` answers them: added, used, and the balance left. */
export function toCreditsBody(c: Credits) {
  return {
    total_credits: toUsd(c.totalCredits),
    total_usage: toUsd(c.totalUsage),
    balance: toUsd(c.totalCredits - c.totalUsage),
  }
}

/** The same and what admission holds now for requests in flight: the `credits` of an account's body. */
export function toHeldCreditsBody(c: Credits) {
  return { ...toCreditsBody(c), reserved: toUsd(c.reserved) }
}

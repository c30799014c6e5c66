import { z } from 'zod'
import { toPpm } from '../billing/money.ts'

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

import type { AdmissionStore, LedgerStore, RateLimitStore } from './types.ts'

// AdmissionStore as the two calls in a row, for a backend whose calls cost no round trip (memory), or
// whose rate limits live elsewhere.

export function composeAdmission(ledger: LedgerStore, rateLimits: RateLimitStore): AdmissionStore {
  return {
    async beforeBody(accountId, checks, windowMs, now, credits) {
      const { allowed, decisions } =
        checks.length > 0 ? await rateLimits.consume(checks, windowMs, now) : { allowed: true, decisions: [] }
      if (!allowed || !credits) return { allowed, decisions, hasCredits: null }
      const c = await ledger.credits(accountId, now)
      return { allowed, decisions, hasCredits: c.totalCredits - c.totalUsage - c.reserved > 0n }
    },
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs, key) {
      const { allowed, decisions } =
        checks.length > 0 ? await rateLimits.consume(checks, windowMs, now) : { allowed: true, decisions: [] }
      if (!allowed) return { allowed, decisions, reservation: null }
      if (key) {
        const held = await ledger.reserveForKey(accountId, id, upperBound, now, ttlMs, key)
        return { allowed, decisions, ...held }
      }
      return { allowed, decisions, reservation: await ledger.reserve(accountId, id, upperBound, now, ttlMs) }
    },
  }
}

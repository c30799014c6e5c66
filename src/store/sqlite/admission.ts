import type { AdmissionStore } from '../types.ts'
import type { SqliteHelpers } from './commit.ts'
import { creditsOf, reserveNow } from './ledger.ts'
import { consumeNow } from './rate-limits.ts'

// One store call, one savepoint in the group commit, for each step of a request's admission: the
// rate limits (rate-limits.ts), then the ledger (ledger.ts).

export function createSqliteAdmissionStore(h: SqliteHelpers): AdmissionStore {
  return {
    async beforeBody(accountId, checks, windowMs, now, credits) {
      return h.tx(() => {
        const { allowed, decisions } = consumeNow(h, checks, windowMs, now)
        if (!allowed || !credits) return { allowed, decisions, hasCredits: null }
        const c = creditsOf(h, accountId, now)
        return { allowed, decisions, hasCredits: c.totalCredits - c.totalUsage - c.reserved > 0n }
      }, checks.length > 0)
    },
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs, key) {
      return h.tx(() => {
        const { allowed, decisions } = consumeNow(h, checks, windowMs, now)
        if (!allowed) return { allowed, decisions, reservation: null }
        const held = reserveNow(h, accountId, id, upperBound, now, ttlMs, key)
        return key ? { allowed, decisions, ...held } : { allowed, decisions, reservation: held.reservation }
      })
    },
  }
}

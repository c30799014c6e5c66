import type { RateCheck, RateDecision } from './types.ts'

// The sliding one-window counters of the memory and SQLite stores (PostgreSQL does the same in
// junction_consume): each key keeps the current fixed window's count and the previous one's, and the
// previous window weighs as much as it still overlaps the last windowMs.

export interface RateWindow {
  start: number
  current: number
  previous: number
}

/** The window `w` rolled to the fixed window holding `now` (the previous count kept if adjacent). */
export function rollWindow(w: RateWindow, windowMs: number, now: number): void {
  const start = now - (now % windowMs)
  if (w.start === start) return
  w.previous = start - w.start === windowMs ? w.current : 0
  w.current = 0
  w.start = start
}

/**
 * Decides the checks together, all or none, against the windows `windowOf` gives (rolled to `now`),
 * and counts them into those windows when all fit.
 */
export function consumeWindows(
  checks: readonly RateCheck[],
  windowOf: (key: string) => RateWindow,
  windowMs: number,
  now: number,
): { allowed: boolean; decisions: RateDecision[] } {
  // What earlier checks of this call would add, should one key appear twice.
  const pending = new Map<string, number>()
  const seen = checks.map((check) => {
    const w = windowOf(check.key)
    const weight = 1 - (now - w.start) / windowMs
    const before = pending.get(check.key) ?? 0
    const used = Math.ceil(w.previous * weight) + w.current + before
    pending.set(check.key, before + check.amount)
    return { check, w, used, fits: used + check.amount <= check.limit }
  })
  const allowed = seen.every((s) => s.fits)
  if (allowed) for (const s of seen) s.w.current += s.check.amount
  return {
    allowed,
    decisions: seen.map(({ check, w, used, fits }) => ({
      allowed: fits,
      limit: check.limit,
      remaining: Math.max(0, check.limit - used - (allowed ? check.amount : 0)),
      resetAt: w.start + windowMs,
    })),
  }
}

import { consumeWindows, rollWindow } from '../rate-windows.ts'
import type { RateCheck, RateDecision, RateLimitStore } from '../types.ts'
import type { SqliteHelpers } from './commit.ts'

// The same sliding one-window counters as the memory store (rate-windows.ts), loaded from and written
// back to the file within the transaction.

interface WindowRow {
  start: number
  current: number
  previous: number
  window_ms: number
}

const writeWindow = ({ run }: SqliteHelpers, key: string, w: WindowRow): void => {
  run(
    `INSERT INTO rate_windows (key, window_ms, start, current, previous) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (key) DO UPDATE SET window_ms = excluded.window_ms, start = excluded.start,
       current = excluded.current, previous = excluded.previous`,
    key,
    w.window_ms,
    w.start,
    w.current,
    w.previous,
  )
}

/** RateLimitStore.consume, inside a transaction. */
export function consumeNow(
  h: SqliteHelpers,
  checks: readonly RateCheck[],
  windowMs: number,
  now: number,
): { allowed: boolean; decisions: RateDecision[] } {
  if (checks.length === 0) return { allowed: true, decisions: [] }
  const windows = new Map<string, WindowRow>()
  const windowOf = (key: string): WindowRow => {
    let w = windows.get(key)
    if (w) return w
    w = h.get<WindowRow>('SELECT start, current, previous, window_ms FROM rate_windows WHERE key = ?', key)
    w = w ? { ...w } : { start: now - (now % windowMs), current: 0, previous: 0, window_ms: windowMs }
    rollWindow(w, windowMs, now)
    w.window_ms = windowMs
    windows.set(key, w)
    return w
  }
  const decided = consumeWindows(checks, windowOf, windowMs, now)
  for (const [key, w] of windows) writeWindow(h, key, w)
  return decided
}

export function createSqliteRateLimitStore(h: SqliteHelpers): RateLimitStore {
  const { get, run, tx } = h
  return {
    async sweep(now) {
      await tx(() => run('DELETE FROM rate_windows WHERE ? - start >= 2 * window_ms', now))
    },
    async consume(checks, windowMs, now) {
      if (checks.length === 0) return { allowed: true, decisions: [] }
      return tx(() => consumeNow(h, checks, windowMs, now))
    },
    async adjust(key, delta, windowMs, now) {
      await tx(() => {
        const start = now - (now % windowMs)
        const w = get<WindowRow>(
          'SELECT start, current, previous, window_ms FROM rate_windows WHERE key = ?',
          key,
        )
        const next: WindowRow = w
          ? { ...w, window_ms: windowMs }
          : { start, current: 0, previous: 0, window_ms: windowMs }
        rollWindow(next, windowMs, now)
        next.current = Math.max(0, next.current + delta)
        writeWindow(h, key, next)
      })
    },
  }
}

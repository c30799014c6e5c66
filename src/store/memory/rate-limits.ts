import { consumeWindows, rollWindow } from '../rate-windows.ts'
import type { RateLimitStore } from '../types.ts'

// Sliding one-window counters in one process (rate-windows.ts does the arithmetic).

export function createMemoryRateLimitStore(): RateLimitStore {
  const windows = new Map<string, { start: number; current: number; previous: number; windowMs: number }>()
  const windowOf = (key: string, windowMs: number, now: number) => {
    let w = windows.get(key)
    if (!w) {
      w = { start: now - (now % windowMs), current: 0, previous: 0, windowMs }
      windows.set(key, w)
    } else rollWindow(w, windowMs, now)
    return w
  }
  return {
    async sweep(now) {
      for (const [key, w] of windows) if (now - w.start >= 2 * w.windowMs) windows.delete(key)
    },
    async consume(checks, windowMs, now) {
      return consumeWindows(checks, (key) => windowOf(key, windowMs, now), windowMs, now)
    },
    async adjust(key, delta, windowMs, now) {
      const w = windowOf(key, windowMs, now)
      w.current = Math.max(0, w.current + delta)
    },
  }
}

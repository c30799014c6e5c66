import type { ActivityRow } from './types.ts'

// GenerationStore.activity's shared pieces: days are UTC days, rows come by day, then model.

export const DAY_MS = 86_400_000

export const byDayThenModel = (a: ActivityRow, b: ActivityRow): number =>
  a.day - b.day || (a.model < b.model ? -1 : a.model > b.model ? 1 : 0)

/**
 * SQL for an exact sum of non-negative decimal picodollar strings in SQLite, whose integers are 64-bit:
 * the digits above and below 10^12 are summed apart, each far from overflowing, and joined by `joinSplitSum`.
 */
export const splitSumSql = (x: string): [string, string] => [
  `sum(CASE WHEN length(${x}) > 12 THEN CAST(substr(${x}, 1, length(${x}) - 12) AS INTEGER) ELSE 0 END)`,
  `sum(CAST(substr(${x}, -12) AS INTEGER))`,
]

export const joinSplitSum = (high: number | bigint, low: number | bigint): bigint =>
  BigInt(high) * 1_000_000_000_000n + BigInt(low)

import type { RateCheck, RateDecision, RateLimitStore } from '../types.ts'
import { batched, type Batch } from './batch.ts'
import type { Query } from './pool.ts'

// Rate-limit windows. The consume rows, their decisions and the flattened checks are shared with
// admission.ts, whose fused statements judge the same checks.

interface AdjustItem {
  key: string
  delta: number
  windowMs: number
  now: number
}

export interface ConsumeItem {
  checks: readonly RateCheck[]
  windowMs: number
  now: number
}

export type ConsumeRow = { fits: boolean; used: string }

/** The decisions of one consume call from its rows (one per check, in order). */
export function toDecisions({ checks, windowMs, now }: ConsumeItem, rows: ConsumeRow[]) {
  const allowed = rows.every((r) => r.fits)
  const resetAt = now - (now % windowMs) + windowMs
  return {
    allowed,
    decisions: checks.map((check, i): RateDecision => {
      const used = Number(rows[i]!.used)
      return {
        allowed: rows[i]!.fits,
        limit: check.limit,
        remaining: Math.max(0, check.limit - used - (allowed ? check.amount : 0)),
        resetAt,
      }
    }),
  }
}

export function createRateLimits(query: Query, batch: Batch): RateLimitStore {
  const consume = batched<ConsumeItem, { allowed: boolean; decisions: RateDecision[] }>(
    batch,
    async (item) => {
      const { checks, windowMs, now } = item
      // One round trip: junction_consume (migration 3) locks the windows in key order, rolls them over,
      // judges every check and counts all or nothing, with the same arithmetic as memory/rate-limits.ts.
      const { rows } = await query<ConsumeRow>(
        'SELECT fits, used FROM junction_consume($1::text[], $2::bigint[], $3::bigint[], $4, $5)',
        [checks.map((c) => c.key), checks.map((c) => c.amount), checks.map((c) => c.limit), windowMs, now],
        'consume',
      )
      return toDecisions(item, rows)
    },
    async (items) => {
      // One round trip for the batch: junction_consume_many (migration 15) locks and reads every window
      // of the batch in key order, decides the calls in order as junction_consume would, and writes
      // each window once.
      const { rows } = await query<ConsumeRow & { call: number }>(
        `SELECT call, fits, used FROM junction_consume_many($1::integer[], $2::integer[], $3::bigint[],
           $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])`,
        flattenChecks(items),
        'consume_many',
      )
      const perCall: ConsumeRow[][] = items.map(() => [])
      for (const r of rows) perCall[r.call - 1]!.push(r)
      return items.map((item, i) => toDecisions(item, perCall[i]!))
    },
  )
  // A request of an account with a tokens limit corrects its estimate when it ends: batched too.
  const adjust = batched<AdjustItem, void>(
    batch,
    async ({ key, delta, windowMs, now }) => {
      const start = now - (now % windowMs)
      // One statement: the ON CONFLICT branch sees the locked row and rolls it like rollWindow.
      await query(
        `INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
         VALUES ($1, $2, $3, greatest(0, $4::bigint), 0)
         ON CONFLICT (key) DO UPDATE SET
           window_ms = $2,
           start = $3,
           previous = CASE WHEN r.start = $3 THEN r.previous WHEN $3 - r.start = $2 THEN r.current ELSE 0 END,
           current = greatest(0, CASE WHEN r.start = $3 THEN r.current ELSE 0 END + $4::bigint)`,
        [key, windowMs, start, delta],
        'adjust',
      )
    },
    async (items) => {
      await query(
        'SELECT junction_adjust_many($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])',
        [
          items.map((i) => i.key),
          items.map((i) => i.delta),
          items.map((i) => i.windowMs),
          items.map((i) => i.now),
        ],
        'adjust_many',
      )
      return items.map(() => undefined)
    },
  )
  return {
    async sweep(now) {
      // Rows a consume holds are skipped (a consume locks several in key order; waiting for them here
      // could deadlock with it): a skipped row is current again, or goes at the next sweep.
      await query(
        `DELETE FROM rate_windows WHERE key IN (
           SELECT key FROM rate_windows WHERE $1 - start >= 2 * window_ms FOR UPDATE SKIP LOCKED)`,
        [now],
      )
    },
    async consume(checks, windowMs, now) {
      if (checks.length === 0) return { allowed: true, decisions: [] }
      return consume({ checks, windowMs, now })
    },
    adjust: (key, delta, windowMs, now) => adjust({ key, delta, windowMs, now }),
  }
}

/** The rate checks of several calls as junction_consume_many and the fused admissions take them. */
export function flattenChecks(items: { checks: readonly RateCheck[]; windowMs: number; now: number }[]) {
  const first: number[] = []
  let next = 1
  for (const item of items) {
    first.push(next)
    next += item.checks.length
  }
  const flat = items.flatMap((item) => item.checks)
  return [
    first,
    items.map((item) => item.checks.length),
    items.map((item) => item.windowMs),
    items.map((item) => item.now),
    flat.map((c) => c.key),
    flat.map((c) => c.amount),
    flat.map((c) => c.limit),
  ]
}

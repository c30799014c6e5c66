import type { Money } from '../domain/money.ts'
import type { KeyHold } from './types.ts'
import type { AccountNotices, ApiKeyRecord, KeyUsage, LimitReset } from '../domain/accounts.ts'

// A key's spend, shared by every backend: one row of counters per key (everything, and the current
// UTC day, week and month), added to by `settle` in the same step as the account's charge, so a key's
// limit is checked at `reserve` without summing records. Pure functions: the SQL backends load the
// row, apply these and write it back inside their transaction (PostgreSQL does the same in SQL).

const DAY_MS = 86_400_000

/** Where the UTC day, week (from Monday 00:00) and month that contain `t` (Unix ms) begin. */
export function windowStarts(t: number): { day: number; week: number; month: number } {
  const days = Math.floor(t / DAY_MS)
  // 1970-01-01 was a Thursday: three days after a Monday.
  const week = (days - ((((days + 3) % 7) + 7) % 7)) * DAY_MS
  const d = new Date(t)
  return { day: days * DAY_MS, week, month: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1) }
}

export function windowStart(reset: LimitReset, t: number): number {
  const w = windowStarts(t)
  return reset === 'daily' ? w.day : reset === 'weekly' ? w.week : w.month
}

/** A key's counters: each window's sum belongs to the window starting at its `…Start`. */
export interface KeyCounters {
  total: Money
  dayStart: number
  day: Money
  weekStart: number
  week: Money
  monthStart: number
  month: Money
}

export const noCounters = (): KeyCounters => ({
  total: 0n,
  dayStart: 0,
  day: 0n,
  weekStart: 0,
  week: 0n,
  monthStart: 0,
  month: 0n,
})

/**
 * The counters after charging `cost` for a record created at `createdAt`: a window that began later
 * than the stored one starts over; a record of a window already past counts only in the total.
 */
export function chargeCounters(c: KeyCounters, createdAt: number, cost: Money): KeyCounters {
  const w = windowStarts(createdAt)
  const add = (start: number, sum: Money, at: number): [number, Money] =>
    at > start ? [at, cost] : at === start ? [start, sum + cost] : [start, sum]
  const [dayStart, day] = add(c.dayStart, c.day, w.day)
  const [weekStart, week] = add(c.weekStart, c.week, w.week)
  const [monthStart, month] = add(c.monthStart, c.month, w.month)
  return { total: c.total + cost, dayStart, day, weekStart, week, monthStart, month }
}

/** The key's usage at `now`: a window's sum counts only while that window is the current one. */
export function usageAt(c: KeyCounters | undefined, held: Money, now: number): KeyUsage {
  const k = c ?? noCounters()
  const w = windowStarts(now)
  return {
    total: k.total,
    daily: k.dayStart === w.day ? k.day : 0n,
    weekly: k.weekStart === w.week ? k.week : 0n,
    monthly: k.monthStart === w.month ? k.month : 0n,
    held,
  }
}

/** What counts against a limit that resets so: the current window's spend, or everything. */
export function spentFor(u: KeyUsage, reset: LimitReset | null): Money {
  return reset === 'daily'
    ? u.daily
    : reset === 'weekly'
      ? u.weekly
      : reset === 'monthly'
        ? u.monthly
        : u.total
}

/** What the key may still hold: its limit less its window's spend and its open holds; null: no limit. */
export function keyRoom(c: KeyCounters | undefined, key: KeyHold, held: Money, now: number): Money | null {
  if (key.limit === null) return null
  return key.limit - spentFor(usageAt(c, held, now), key.limitReset) - held
}

/** The key's settings as the SQL backends keep them (one JSON text column, money as decimal strings). */
export function encodeKeySettings(k: ApiKeyRecord): string {
  const money = (m: Money | null | undefined) => (m === undefined || m === null ? null : m.toString())
  return JSON.stringify({
    name: k.name ?? null,
    limit: money(k.limit),
    limitReset: k.limitReset ?? null,
    expiresAt: k.expiresAt ?? null,
    disabled: k.disabled ?? false,
    allowedModels: k.allowedModels ?? null,
    rateLimits: k.rateLimits ?? {},
    management: k.management ?? false,
    limitLow: money(k.limitLow),
    updatedAt: k.updatedAt ?? null,
  })
}

interface StoredSettings {
  name?: string | null
  limit?: string | null
  limitReset?: LimitReset | null
  expiresAt?: number | null
  disabled?: boolean
  allowedModels?: string[] | null
  rateLimits?: ApiKeyRecord['rateLimits']
  management?: boolean
  limitLow?: string | null
  updatedAt?: number | null
}

/** The settings `encodeKeySettings` wrote, as ApiKeyRecord fields (defaults left out). */
export function decodeKeySettings(text: string | null | undefined): Partial<ApiKeyRecord> {
  if (!text) return {}
  const s = JSON.parse(text) as StoredSettings
  return {
    ...(s.name != null ? { name: s.name } : {}),
    ...(s.limit != null ? { limit: BigInt(s.limit) } : {}),
    ...(s.limitReset != null ? { limitReset: s.limitReset } : {}),
    ...(s.expiresAt != null ? { expiresAt: s.expiresAt } : {}),
    ...(s.disabled ? { disabled: true } : {}),
    ...(s.allowedModels != null ? { allowedModels: [...s.allowedModels] } : {}),
    ...(s.rateLimits && Object.keys(s.rateLimits).length > 0 ? { rateLimits: { ...s.rateLimits } } : {}),
    ...(s.management ? { management: true } : {}),
    ...(s.limitLow != null ? { limitLow: BigInt(s.limitLow) } : {}),
    ...(s.updatedAt != null ? { updatedAt: s.updatedAt } : {}),
  }
}

/** A key record as stores hand it out: defaults left out, nothing shared with the input. */
export function normalizeKey(k: ApiKeyRecord): ApiKeyRecord {
  return {
    id: k.id,
    accountId: k.accountId,
    hash: k.hash,
    prefix: k.prefix,
    createdAt: k.createdAt,
    ...decodeKeySettings(encodeKeySettings(k)),
  }
}

/** An account's notice settings as the SQL backends keep them (JSON, money as a decimal string). */
export function encodeNotices(n: AccountNotices | undefined): string {
  if (!n) return '{}'
  return JSON.stringify({ url: n.url, balanceLow: n.balanceLow === null ? null : n.balanceLow.toString() })
}

export function decodeNotices(text: string | object | null | undefined): AccountNotices | undefined {
  if (!text) return undefined
  const n = (typeof text === 'string' ? JSON.parse(text) : text) as {
    url?: string | null
    balanceLow?: string | null
  }
  if (n.url === undefined && n.balanceLow === undefined) return undefined
  return { url: n.url ?? null, balanceLow: n.balanceLow == null ? null : BigInt(n.balanceLow) }
}

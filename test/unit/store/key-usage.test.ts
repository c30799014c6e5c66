import { describe, expect, it } from 'vitest'
import {
  chargeCounters,
  decodeKeySettings,
  encodeKeySettings,
  keyRoom,
  noCounters,
  usageAt,
  windowStarts,
} from '../../../src/store/key-usage.ts'
import type { ApiKeyRecord } from '../../../src/domain/accounts.ts'

describe('key spend windows', () => {
  it('start at 00:00 UTC, on Monday 00:00 UTC and on the 1st 00:00 UTC', () => {
    // Sunday 2026-03-01 23:59:59.999 UTC, then Monday 2026-03-02 00:00 UTC.
    expect(windowStarts(Date.UTC(2026, 2, 1, 23, 59, 59, 999))).toEqual({
      day: Date.UTC(2026, 2, 1),
      week: Date.UTC(2026, 1, 23),
      month: Date.UTC(2026, 2, 1),
    })
    expect(windowStarts(Date.UTC(2026, 2, 2))).toEqual({
      day: Date.UTC(2026, 2, 2),
      week: Date.UTC(2026, 2, 2),
      month: Date.UTC(2026, 2, 1),
    })
    // The epoch's own week began on Monday 1969-12-29.
    expect(windowStarts(0).week).toBe(Date.UTC(1969, 11, 29))
    // A leap day, and the last instant of a year.
    expect(windowStarts(Date.UTC(2028, 1, 29, 12)).month).toBe(Date.UTC(2028, 1, 1))
    expect(windowStarts(Date.UTC(2026, 11, 31, 23, 59, 59, 999))).toEqual({
      day: Date.UTC(2026, 11, 31),
      week: Date.UTC(2026, 11, 28),
      month: Date.UTC(2026, 11, 1),
    })
  })

  it('charges roll a window forward; a late record counts only in the windows still current', () => {
    const mon = Date.UTC(2026, 2, 2, 10)
    let c = chargeCounters(noCounters(), mon, 5n)
    c = chargeCounters(c, mon + 1000, 7n)
    expect(usageAt(c, 0n, mon + 2000)).toEqual({
      total: 12n,
      daily: 12n,
      weekly: 12n,
      monthly: 12n,
      held: 0n,
    })
    const tue = Date.UTC(2026, 2, 3, 1)
    c = chargeCounters(c, tue, 1n)
    expect(usageAt(c, 3n, tue)).toEqual({ total: 13n, daily: 1n, weekly: 13n, monthly: 13n, held: 3n })
    c = chargeCounters(c, mon, 2n) // created Monday, settled Tuesday
    expect(usageAt(c, 0n, tue)).toEqual({ total: 15n, daily: 1n, weekly: 15n, monthly: 15n, held: 0n })
    expect(usageAt(c, 0n, Date.UTC(2026, 3, 1))).toMatchObject({ daily: 0n, weekly: 0n, monthly: 0n })
  })

  it('room is the limit less the window’s spend and the open holds; no limit is no bound', () => {
    const t = Date.UTC(2026, 2, 2, 10)
    const c = chargeCounters(noCounters(), t, 60n)
    const key = { hash: 'h', limit: 100n, limitReset: 'daily' as const }
    expect(keyRoom(c, key, 30n, t)).toBe(10n)
    expect(keyRoom(c, key, 50n, t)).toBe(-10n)
    expect(keyRoom(c, key, 0n, Date.UTC(2026, 2, 3))).toBe(100n)
    expect(keyRoom(c, { ...key, limitReset: null }, 0n, Date.UTC(2027, 0, 1))).toBe(40n)
    expect(keyRoom(c, { ...key, limit: null }, 0n, t)).toBeNull()
  })

  it('settings round-trip through their stored form, defaults left out', () => {
    const base: ApiKeyRecord = { id: 'k', accountId: 'a', hash: 'h', prefix: 'sk-', createdAt: 1 }
    const full: ApiKeyRecord = {
      ...base,
      name: 'n',
      limit: 10n ** 21n,
      limitReset: 'weekly',
      expiresAt: 5,
      disabled: true,
      allowedModels: ['a/*'],
      rateLimits: { tokensPerMinute: 9 },
      management: true,
      limitLow: 3n,
      updatedAt: 4,
    }
    const { id: _i, accountId: _a, hash: _h, prefix: _p, createdAt: _c, ...settings } = full
    expect(decodeKeySettings(encodeKeySettings(full))).toEqual(settings)
    expect(decodeKeySettings(encodeKeySettings(base))).toEqual({})
    expect(decodeKeySettings('{}')).toEqual({})
  })
})

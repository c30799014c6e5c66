import { describe, expect, it } from 'vitest'
import { createIsoTime } from '../../src/logger.ts'

// The log line's timestamp is written from a kept second and the milliseconds: it must be the text
// pino's own isoTime writes, at every instant, across seconds, minutes, days and years.

describe('createIsoTime', () => {
  it("writes pino's isoTime text at every instant", () => {
    const instants = [
      0,
      999,
      1000,
      Date.UTC(2026, 10, 26, 7, 59, 59, 999),
      Date.UTC(2026, 10, 26, 8, 0, 0, 0),
      Date.UTC(2026, 11, 31, 23, 59, 59, 995),
      Date.UTC(9999, 11, 31, 23, 59, 59, 999),
    ]
    // Forwards in steps of 1 to 997 ms over a few hours, and back again (a clock set back).
    let t = Date.UTC(2026, 1, 28, 23, 0, 0, 0)
    for (let i = 0; i < 20_000; i++) instants.push((t += 1 + ((i * 7919) % 997)))
    for (let i = 0; i < 2_000; i++) instants.push((t -= 1 + ((i * 104_729) % 1_499)))
    let now = 0
    const isoTime = createIsoTime(() => now)
    for (const instant of instants) {
      now = instant
      expect(isoTime()).toBe(`,"time":"${new Date(instant).toISOString()}"`)
    }
  })

  it('reads the clock by default', () => {
    const before = Date.now()
    const time = Date.parse(createIsoTime()().slice(9, -1))
    expect(time).toBeGreaterThanOrEqual(before)
    expect(time).toBeLessThanOrEqual(Date.now())
  })
})

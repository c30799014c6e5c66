import { describe, expect, it } from 'vitest'
import { applyPpm, fromPpm, perUnit, toPpm, toUsd, usd } from '../../../src/billing/money.ts'

describe('money', () => {
  it('parses USD without float error', () => {
    expect(usd(0.1) + usd(0.2)).toBe(usd('0.3'))
    expect(usd('0.075')).toBe(75_000_000_000n)
    expect(usd(1e-7)).toBe(100_000n)
    expect(usd(100)).toBe(100_000_000_000_000n)
    expect(() => usd('0.0000000000001')).toThrow(/decimals/)
    expect(() => usd(Number.NaN)).toThrow()
  })

  it('converts back to a USD number only at the edge', () => {
    expect(toUsd(usd('99.999955'))).toBe(99.999955)
    expect(toUsd(-usd('0.5'))).toBe(-0.5)
    expect(toUsd(45_000_000n)).toBe(0.000045)
  })

  it('turns a price per million into an exact per-unit amount', () => {
    expect(perUnit(0.005)).toBe(5_000n) // the cheapest token we list: 5 000 picodollars
    expect(perUnit(2.5)).toBe(2_500_000n)
    expect(() => perUnit(0.0000001)).toThrow(/6 decimals/)
  })

  it('applies a decimal discount rate exactly', () => {
    expect(toPpm(0.75)).toBe(750_000)
    expect(fromPpm(750_000)).toBe(0.75)
    expect(applyPpm(usd(1), 750_000)).toBe(usd('0.75'))
    expect(applyPpm(3n, 500_000)).toBe(2n) // half up at the picodollar
    expect(() => toPpm(1.5)).toThrow()
  })
})

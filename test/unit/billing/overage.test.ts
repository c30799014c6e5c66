import { describe, expect, it } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import { capCharge, chargeCeiling } from '../../../src/billing/overage.ts'
import { generationFixture } from '../../contract/store.ts'

describe('chargeCeiling', () => {
  it('is the hold, within what the balance less the other holds allows', () => {
    expect(chargeCeiling({ held: usd(1), overdraft: 0n, free: usd(5) })).toBe(usd(1))
    expect(chargeCeiling({ held: usd(1), overdraft: 0n, free: usd('0.4') })).toBe(usd('0.4'))
    expect(chargeCeiling({ held: undefined, overdraft: 0n, free: usd(5) })).toBe(usd(5))
  })

  it('adds the overdraft to both, and is never below zero', () => {
    expect(chargeCeiling({ held: usd(1), overdraft: usd('0.5'), free: usd(5) })).toBe(usd('1.5'))
    expect(chargeCeiling({ held: usd(1), overdraft: usd('0.5'), free: usd('0.2') })).toBe(usd('0.7'))
    expect(chargeCeiling({ held: usd(1), overdraft: usd('0.5'), free: -usd(3) })).toBe(0n)
    expect(chargeCeiling({ held: usd(1), overdraft: -usd(1), free: usd(5) })).toBe(usd(1))
  })
})

describe('capCharge', () => {
  it('keeps a record within the ceiling as it is', () => {
    const r = generationFixture('g', 'a', { cost: usd(1) })
    expect(capCharge(r, usd(1))).toBe(r)
  })

  it('charges the ceiling and records the rest, with its share of the tokens rounded half up', () => {
    const usage = { ...generationFixture('g', 'a').usage, total_tokens: 3 }
    const r = generationFixture('g', 'a', { cost: usd(3), usage })
    expect(capCharge(r, usd(1))).toEqual({
      ...r,
      cost: usd(1),
      unbilledOverage: { usd: usd(2), tokens: 2 },
    })
    // 2.5 tokens rounds up to 3; a ceiling of 0 leaves all of it unbilled.
    const five = generationFixture('g', 'a', { cost: usd(2), usage: { ...usage, total_tokens: 5 } })
    expect(capCharge(five, usd(1)).unbilledOverage).toEqual({ usd: usd(1), tokens: 3 })
    expect(capCharge(five, 0n)).toMatchObject({ cost: 0n, unbilledOverage: { usd: usd(2), tokens: 5 } })
  })
})

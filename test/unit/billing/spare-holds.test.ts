import { pino } from 'pino'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import {
  admit,
  admitRequest,
  createMeteringStats,
  settle,
  type MeteringDeps,
} from '../../../src/billing/metering.ts'
import { createSpareHolds, type SpareHolds } from '../../../src/billing/spare-holds.ts'
import { loadConfig } from '../../../src/config.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import type { Store } from '../../../src/store/types.ts'
import type { Account, ApiKeyRecord } from '../../../src/domain/accounts.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'

// Holds taken ahead (src/billing/spare-holds.ts) through admission and settlement (metering.ts), on the
// memory store: what a busy account's requests hold, what they are charged, what stays held, and when
// it is given back.

const account = accountFixture('acct', { discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} })
const log = pino({ level: 'silent' })

const opened: SpareHolds[] = []
afterEach(async () => {
  vi.useRealTimers()
  await Promise.all(opened.splice(0).map((s) => s.close()))
})

async function setup(credits: number, max = 8, idleMs = 60_000, maxTotal?: number) {
  const store = createMemoryStore()
  await store.accounts.create(account, usd(credits))
  const clock = { now: 1_000 }
  const config = loadConfig({ NODE_ENV: 'test' })
  const spares = createSpareHolds(
    { ledger: store.ledger, log, now: () => clock.now },
    { max, idleMs, ttlMs: 900_000, maxTotal },
  )
  opened.push(spares)
  const deps: MeteringDeps = { store, config, log, stats: createMeteringStats(), spares }
  const reserveCalls = countCalls(store)
  return { store, deps, clock, spares, reserveCalls }
}

/** Counts admission's own store calls (the holds taken ahead go through store.ledger.reserve). */
function countCalls(store: Store): { count: number } {
  const calls = { count: 0 }
  const real = store.admission.reserve.bind(store.admission)
  store.admission.reserve = (...args) => {
    calls.count++
    return real(...args)
  }
  return calls
}

let n = 0
/** One request: admitted with `bound`, then settled at `cost`, 10 ms later. */
async function request(
  s: Awaited<ReturnType<typeof setup>>,
  bound: bigint,
  cost: bigint,
  who: Account = account,
  key?: ApiKeyRecord,
) {
  const generationId = `gen-${++n}`
  const a = await admit(s.deps, {
    account: who,
    key,
    slug: 'team/m',
    generationId,
    costBound: bound,
    tokenEstimate: 10,
    ttlMs: 900_000,
    now: s.clock.now,
  })
  s.clock.now += 10
  const record = generationFixture(generationId, who.id, { cost, keyHash: key?.hash })
  const charged = await settle(s.deps, {
    reservation: a.reservation,
    record,
    held: a.reservation.amount,
    tokenEstimate: a.tokenEstimate,
    tokenKeys: a.tokenKeys,
    now: s.clock.now,
  })
  await s.spares.idle()
  return { admission: a, charged }
}

describe('holds taken ahead', () => {
  it('a busy account’s requests take them: no store call to admit, each charged its own cost', async () => {
    const s = await setup(10)
    const bound = usd('0.01')
    const costs: bigint[] = []
    const ids: string[] = []
    for (let i = 0; i < 12; i++) {
      const cost = usd('0.001') * BigInt(1 + (i % 3))
      const { admission, charged } = await request(s, bound, cost)
      expect(charged?.cost).toBe(cost)
      expect(admission.reservation.amount).toBe(bound)
      costs.push(cost)
      ids.push(admission.reservation.id)
    }
    // The first requests hold on their own (the account is not busy yet, nothing is ready); then the
    // holds taken ahead answer every request, and admission stops calling the store.
    expect(ids[0]).toBe('gen-' + (n - 11))
    expect(ids.slice(4).every((id) => id.startsWith('spare-'))).toBe(true)
    expect(s.reserveCalls.count).toBeLessThanOrEqual(4)
    const c = await s.store.ledger.credits(account.id, s.clock.now)
    expect(c.totalUsage).toBe(costs.reduce((a, b) => a + b, 0n))
    // Held: exactly what waits ahead, real reservations, never more than a quarter of what was free.
    expect(s.spares.heldFor(account.id)).toBeGreaterThan(0n)
    expect(c.reserved).toBe(s.spares.heldFor(account.id))
    expect(c.reserved).toBeLessThanOrEqual(usd(10) / 4n)
    expect(c.reserved).toBeLessThanOrEqual(8n * bound)
  })

  it('take at most a quarter of what the account has free, none once that is less than one', async () => {
    const bound = usd('0.01')
    const s = await setup(0.1)
    for (let i = 0; i < 8; i++) {
      await request(s, bound, usd('0.001'))
      const c = await s.store.ledger.credits(account.id, s.clock.now)
      expect(s.spares.heldFor(account.id)).toBe(c.reserved)
      // Free before these holds: credits − usage; a quarter of it, in whole holds of the bound.
      expect(c.reserved * 4n).toBeLessThanOrEqual(c.totalCredits - c.totalUsage)
    }
    const poor = await setup(0.03)
    for (let i = 0; i < 6; i++) await request(poor, bound, usd('0.001'))
    expect(poor.spares.heldFor(account.id)).toBe(0n)
    expect(poor.reserveCalls.count).toBe(6)
  })

  it('are given back before a request is held short or refused for credits', async () => {
    const s = await setup(1)
    for (let i = 0; i < 6; i++) await request(s, usd('0.01'), usd('0.01'))
    const ahead = s.spares.heldFor(account.id)
    expect(ahead).toBeGreaterThan(0n)
    // This request's bound fits in what is free only with half of what waits ahead.
    const c0 = await s.store.ledger.credits(account.id, s.clock.now)
    const bound = c0.totalCredits - c0.totalUsage - c0.reserved + ahead / 2n
    const { admission } = await request(s, bound, usd('0.01'))
    expect(admission.reservation.amount).toBe(bound)
    expect(s.spares.heldFor(account.id)).toBe(0n)

    // Another instance holds all that is free but what waits here: the check before the body gives
    // this instance's back, and passes; once nothing at all is left, 402.
    const t = await setup(1)
    for (let i = 0; i < 6; i++) await request(t, usd('0.01'), usd('0.01'))
    const c = await t.store.ledger.credits(account.id, t.clock.now)
    const rest = c.totalCredits - c.totalUsage - c.reserved
    expect(await t.store.ledger.reserve(account.id, 'elsewhere', rest, t.clock.now, 60_000)).not.toBeNull()
    expect(t.spares.heldFor(account.id)).toBeGreaterThan(0n)
    await admitRequest(t.deps, account, t.clock.now)
    expect(t.spares.heldFor(account.id)).toBe(0n)
    await t.store.ledger.reserve(account.id, 'elsewhere-too', usd(1), t.clock.now, 60_000)
    await expect(admitRequest(t.deps, account, t.clock.now)).rejects.toMatchObject({ status: 402 })
  })

  it('are at most maxTotal on an instance, however many accounts are busy', async () => {
    const s = await setup(10, 8, 60_000, 6)
    const others = ['b1', 'b2', 'b3'].map((id) => ({ ...account, id, name: id }))
    for (const other of others) await s.store.accounts.create(other, usd(10))
    for (let round = 0; round < 6; round++) {
      for (const who of [account, ...others]) await request(s, usd('0.01'), usd('0.001'), who)
      const { holds } = s.spares.totals()
      expect(holds).toBeLessThanOrEqual(6)
      let reserved = 0n
      for (const who of [account, ...others])
        reserved += (await s.store.ledger.credits(who.id, s.clock.now)).reserved
      expect(reserved).toBe(s.spares.totals().amount)
    }
    expect(s.spares.totals().holds).toBeGreaterThan(0)
    // Given back, each account's: the instance's room comes back with them.
    for (const who of [account, ...others]) await s.spares.giveBack(who.id)
    expect(s.spares.totals()).toEqual({ holds: 0, amount: 0n })
    s.clock.now += 2_000
    for (let i = 0; i < 4; i++) await request(s, usd('0.01'), usd('0.001'))
    expect(s.spares.totals().holds).toBeGreaterThan(0)
    expect(s.spares.totals().holds).toBeLessThanOrEqual(6)
  })

  it('are not taken for a request with a per-minute limit or a key limit', async () => {
    const limited = { ...account, rateLimits: { requestsPerMinute: 1000 } }
    const s = await setup(10)
    for (let i = 0; i < 8; i++) {
      const { admission } = await request(s, usd('0.01'), usd('0.001'), limited)
      expect(admission.reservation.id.startsWith('gen-')).toBe(true)
    }
    const key = { hash: 'k1', limit: usd(5), limitReset: null } as unknown as ApiKeyRecord
    for (let i = 0; i < 8; i++) {
      const { admission } = await request(s, usd('0.01'), usd('0.001'), account, key)
      expect(admission.reservation.id.startsWith('gen-')).toBe(true)
    }
    expect(s.reserveCalls.count).toBe(16)
    expect(s.spares.heldFor(account.id)).toBe(0n)
  })

  it('are not handed out once the store has not answered for a second', async () => {
    const s = await setup(10)
    for (let i = 0; i < 8; i++) await request(s, usd('0.01'), usd('0.001'))
    expect(s.spares.heldFor(account.id)).toBeGreaterThan(0n)
    // The store stops answering; a second and a half later, a request must wait for its own hold.
    s.store.admission.reserve = () => new Promise(() => {})
    s.clock.now += 1_500
    let admitted = false
    void admit(s.deps, {
      account,
      slug: 'team/m',
      generationId: 'gen-stalled',
      costBound: usd('0.01'),
      tokenEstimate: 10,
      ttlMs: 900_000,
      now: s.clock.now,
    }).then(() => (admitted = true))
    await new Promise((resolve) => setImmediate(resolve))
    expect(admitted).toBe(false)
    expect(s.spares.heldFor(account.id)).toBeGreaterThan(0n)
  })

  it('are given back when the account goes idle, when the instance closes, and after a give-back', async () => {
    vi.useFakeTimers()
    const s = await setup(10, 8, 10_000)
    for (let i = 0; i < 8; i++) await request(s, usd('0.01'), usd('0.001'))
    expect(s.spares.heldFor(account.id)).toBeGreaterThan(0n)
    s.clock.now += 10_000
    await vi.advanceTimersByTimeAsync(5_000)
    await s.spares.idle()
    expect(s.spares.heldFor(account.id)).toBe(0n)
    expect((await s.store.ledger.credits(account.id, s.clock.now)).reserved).toBe(0n)

    for (let i = 0; i < 8; i++) await request(s, usd('0.01'), usd('0.001'))
    expect((await s.store.ledger.credits(account.id, s.clock.now)).reserved).toBeGreaterThan(0n)
    await s.spares.close()
    expect((await s.store.ledger.credits(account.id, s.clock.now)).reserved).toBe(0n)

    // A refill on its way when the account's holds are given back: what it brings is released.
    const t = await setup(10)
    for (let i = 0; i < 3; i++) await request(t, usd('0.01'), usd('0.001'))
    t.spares.take(account.id, usd('0.5'), t.clock.now)
    await t.spares.giveBack(account.id)
    await t.spares.idle()
    expect(t.spares.heldFor(account.id)).toBe(0n)
    expect((await t.store.ledger.credits(account.id, t.clock.now)).reserved).toBe(0n)
  })
})

import { afterEach, describe, expect, it, vi } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import type { StoredFile, RateLimitStore } from '../../../src/store/types.ts'
import type { Account } from '../../../src/domain/accounts.ts'
import type { GenerationRecord } from '../../../src/domain/records.ts'
import { createMemoryRateLimitStore, createMemoryStore } from '../../../src/store/memory/index.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'

// What only the memory backend does; the interface itself is checked by test/contract/store.ts
// (memory.contract.test.ts).

const account = (id: string): Account =>
  accountFixture(id, { createdAt: 0, discountPpm: 0, modelDiscountsPpm: {}, rateLimits: {} })

const record = (generationId: string, accountId: string): GenerationRecord =>
  generationFixture(generationId, accountId, { upstreamCost: 1n, discountPpm: 0, discount: 0n, cost: 1n })

const file = (accountId: string): StoredFile => ({
  id: 'file-1',
  accountId,
  bytes: 1,
  createdAt: 0,
  filename: 'f.txt',
  purpose: 'user_data',
  contentType: 'text/plain',
  storageKey: 'k1',
})

afterEach(() => {
  vi.restoreAllMocks()
})

describe('memory store', () => {
  it('keeps the newest records per account, still charging every settle', async () => {
    const store = createMemoryStore({ maxGenerationsPerAccount: 2 })
    await store.accounts.create(account('a'), usd(1))
    for (const id of ['g1', 'g2', 'g3']) {
      expect(await store.ledger.settle({ id, accountId: 'a' }, record(id, 'a'))).not.toBeNull()
    }
    expect(await store.generations.get('g1')).toBeNull()
    const page = await store.generations.listByAccount('a', { limit: 10 })
    expect(page.data.map((r) => r.generationId)).toEqual(['g3', 'g2'])
    expect((await store.ledger.credits('a', 0)).totalUsage).toBe(3n)
  })

  it('settles each generation exactly once, also after its record left the window or retention', async () => {
    const store = createMemoryStore({ maxGenerationsPerAccount: 2, retentionDays: 1 })
    await store.accounts.create(account('a'), usd(1))
    for (const id of ['g1', 'g2', 'g3']) await store.ledger.settle({ id, accountId: 'a' }, record(id, 'a'))
    expect(await store.generations.get('g1')).toBeNull()
    // A late repeat of g1 (a task runner finishing twice, a replay): charged nothing, stored nothing.
    expect(await store.ledger.settle({ id: 'g1', accountId: 'a' }, record('g1', 'a'))).toBeNull()
    expect((await store.ledger.credits('a', 0)).totalUsage).toBe(3n)
    expect(await store.generations.get('g1')).toBeNull()
    // Retention deletes every record; the ids still count as settled.
    await store.sweep(10 * 86_400_000 + 1_700_000_000_000)
    expect(await store.generations.get('g3')).toBeNull()
    expect(await store.ledger.settle({ id: 'g3', accountId: 'a' }, record('g3', 'a'))).toBeNull()
    expect((await store.ledger.credits('a', 0)).totalUsage).toBe(3n)
  })

  it('takes its rate limits from another backend when given one', async () => {
    const other = createMemoryRateLimitStore()
    const consume = vi.spyOn(other, 'consume')
    const store = createMemoryStore({ rateLimits: other })
    expect(store.rateLimits).toBe(other)
    await store.rateLimits.consume([{ key: 'k', amount: 1, limit: 1 }], 60_000, 0)
    expect(consume).toHaveBeenCalledOnce()
    // The ledger group is unaffected by the swap.
    expect(await store.accounts.create(account('a'), usd(1))).toBe(true)
  })

  it('never reads the clock: every time is the caller’s now', async () => {
    const clock = vi.spyOn(Date, 'now')
    const store = createMemoryStore()
    const limits: RateLimitStore = store.rateLimits
    await store.accounts.create(account('a'), usd(1))
    const r = await store.ledger.reserve('a', 'g1', usd('0.5'), 10, 1000)
    expect(r).toEqual({ id: 'g1', accountId: 'a', amount: usd('0.5'), expiresAt: 1010 })
    expect(await store.ledger.renew(r!, 20, 1000)).toBe(true)
    await store.ledger.addCredits('a', usd(1), 30)
    await store.ledger.credits('a', 40)
    await store.ledger.settle(r!, record('g1', 'a'))
    await limits.consume([{ key: 'k', amount: 1, limit: 5 }], 60_000, 50)
    await limits.adjust('k', 1, 60_000, 60)
    const f = await store.files.reserve('a', { maxFiles: 1, maxBytes: 10 }, 70, 1000)
    expect(f.ok).toBe(true)
    if (f.ok)
      expect(await store.files.commit(f.token, file('a'), { maxFiles: 1, maxBytes: 10 }, 80)).toBe(true)
    expect(clock).not.toHaveBeenCalled()
  })
})

import { createHash, randomUUID } from 'node:crypto'
import { describe, expect, it, onTestFinished } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import { toGatewayError } from '../../src/errors.ts'
import type { FileQuota, StoredFile, Store } from '../../src/store/types.ts'
import type { Account, ApiKeyRecord } from '../../src/domain/accounts.ts'
import type { GenerationRecord } from '../../src/domain/records.ts'

// The one contract of the Store interfaces. Every backend runs it (memory.contract.test.ts, and the
// SQL backends next): what passes here is what routes and metering may rely on.
//
// Each test opens its own store and uses ids of its own, so a backend may share one database
// between tests. Times are plain numbers: the store never reads a clock.

const MINUTE = 60_000

/** A fresh id, unique across tests and runs. */
const uid = (prefix: string): string => `${prefix}-${randomUUID()}`

export function accountFixture(id: string, over: Partial<Account> = {}): Account {
  return {
    id,
    name: `name of ${id}`,
    createdAt: 1_700_000_000_000,
    discountPpm: 250_000,
    modelDiscountsPpm: { 'mock/chat': 500_000 },
    rateLimits: { requestsPerMinute: 10, tokensPerMinute: 1000 },
    ...over,
  }
}

export function generationFixture(
  generationId: string,
  accountId: string,
  over: Partial<GenerationRecord> = {},
): GenerationRecord {
  return {
    generationId,
    accountId,
    api: '/v1/chat/completions',
    model: 'mock/chat',
    provider: 'mock',
    createdAt: 1_700_000_000_000,
    generationTimeMs: 120,
    latencyMs: 40,
    streamed: true,
    finishReason: 'stop',
    cancelled: false,
    costSource: 'upstream',
    usage: {
      prompt_tokens: 10,
      completion_tokens: 5,
      total_tokens: 15,
      prompt_tokens_details: { cached_tokens: 2, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 1, image_tokens: 0, audio_tokens: 0 },
    },
    upstreamCost: 4_000_000n,
    discountPpm: 250_000,
    discount: 1_000_000n,
    cost: 3_000_000n,
    ...over,
  }
}

let fileCounter = 0
function fileFixture(accountId: string, over: Partial<StoredFile> = {}): StoredFile {
  const n = ++fileCounter
  return {
    id: uid(`file-${n}`),
    accountId,
    bytes: 100,
    createdAt: 1_700_000_000_000 + n * 1000,
    filename: `f${n}.txt`,
    purpose: 'user_data',
    contentType: 'text/plain',
    storageKey: uid('key'),
    ...over,
  }
}

const keyFixture = (accountId: string, secret = uid('sk')): ApiKeyRecord => ({
  id: uid('key'),
  accountId,
  hash: createHash('sha256').update(secret).digest('hex'),
  prefix: secret.slice(0, 10),
  createdAt: 1_700_000_000_000,
})

export function describeStoreContract(name: string, makeStore: () => Promise<Store>): void {
  const open = async (): Promise<Store> => {
    const store = await makeStore()
    onTestFinished(() => store.close())
    await store.ping()
    return store
  }

  /** A store with one fresh account holding `credits`. */
  const withAccount = async (credits: bigint) => {
    const store = await open()
    const id = uid('acct')
    expect(await store.accounts.create(accountFixture(id), credits)).toBe(true)
    return { store, id }
  }

  describe(`Store contract: ${name}`, () => {
    describe('accounts', () => {
      it('creates an account and opens its ledger exactly once', async () => {
        const store = await open()
        const id = uid('acct')
        const account = accountFixture(id)
        expect(await store.accounts.create(account, usd(5))).toBe(true)
        expect(await store.accounts.get(id)).toEqual(account)
        expect(await store.ledger.credits(id, 0)).toEqual({
          totalCredits: usd(5),
          totalUsage: 0n,
          reserved: 0n,
        })

        // A second create changes nothing: neither the account nor its credits.
        expect(await store.accounts.create(accountFixture(id, { name: 'other' }), usd(50))).toBe(false)
        expect(await store.accounts.get(id)).toEqual(account)
        expect((await store.ledger.credits(id, 0)).totalCredits).toBe(usd(5))
      })

      it('gets, updates and lists accounts; unknown ones are null', async () => {
        const store = await open()
        const older = accountFixture(uid('acct'), { createdAt: 1000 })
        const newer = accountFixture(uid('acct'), { createdAt: 2000 })
        await store.accounts.create(newer, 0n)
        await store.accounts.create(older, 0n)
        expect(await store.accounts.get(uid('missing'))).toBeNull()
        expect(await store.accounts.update(uid('missing'), { name: 'x' })).toBeNull()

        const updated = await store.accounts.update(older.id, {
          name: 'renamed',
          discountPpm: 0,
          modelDiscountsPpm: {},
          rateLimits: { requestsPerMinute: 3 },
        })
        const expected = {
          ...older,
          name: 'renamed',
          discountPpm: 0,
          modelDiscountsPpm: {},
          rateLimits: { requestsPerMinute: 3 },
        }
        expect(updated).toEqual(expected)
        expect(await store.accounts.get(older.id)).toEqual(expected)

        const mine = (await store.accounts.list()).filter((a) => a.id === older.id || a.id === newer.id)
        expect(mine.map((a) => a.id)).toEqual([older.id, newer.id])
      })

      it('finds an account by key hash; keys are listed, re-added idempotently and removed', async () => {
        const { store, id } = await withAccount(0n)
        const other = uid('acct')
        await store.accounts.create(accountFixture(other), 0n)
        const k1 = keyFixture(id)
        const k2 = { ...keyFixture(id), createdAt: k1.createdAt + 1 }
        await store.accounts.addKey(k1)
        await store.accounts.addKey(k2)
        await store.accounts.addKey(k1)

        expect((await store.accounts.findByKeyHash(k1.hash))?.id).toBe(id)
        expect(await store.accounts.findByKeyHash(keyFixture(id).hash)).toBeNull()
        expect(await store.accounts.listKeys(id)).toEqual([k1, k2])
        expect(await store.accounts.listKeys(other)).toEqual([])

        expect(await store.accounts.removeKey(other, k1.id)).toBe(false)
        expect(await store.accounts.removeKey(id, k1.id)).toBe(true)
        expect(await store.accounts.removeKey(id, k1.id)).toBe(false)
        expect(await store.accounts.findByKeyHash(k1.hash)).toBeNull()
        expect((await store.accounts.findByKeyHash(k2.hash))?.id).toBe(id)
      })
    })

    describe('keys', () => {
      // 2023-11-14 (a Tuesday) 22:13:20 UTC, and what follows it on a test clock.
      const T0 = 1_700_000_000_000
      const DAY = 86_400_000
      const nextDay = Date.UTC(2023, 10, 15) // 00:00 UTC the next day (still the same week and month)
      const nextWeek = Date.UTC(2023, 10, 20) // Monday 00:00 UTC
      const nextMonth = Date.UTC(2023, 11, 1)

      it('keeps a key’s settings, finds the key with its account, updates it per account only', async () => {
        const { store, id } = await withAccount(0n)
        const other = uid('acct')
        await store.accounts.create(accountFixture(other), 0n)
        const key: ApiKeyRecord = {
          ...keyFixture(id),
          name: 'ci',
          limit: usd('0.01'),
          limitReset: 'daily',
          expiresAt: T0 + DAY,
          allowedModels: ['anthropic/*', 'mock/chat'],
          rateLimits: { requestsPerMinute: 5 },
          limitLow: usd('0.002'),
        }
        const bare = keyFixture(id)
        await store.accounts.addKey(key)
        await store.accounts.addKey(bare)

        expect(await store.accounts.findKey(key.hash)).toEqual({ account: accountFixture(id), key })
        expect((await store.accounts.findKey(bare.hash))?.key).toEqual(bare)
        expect(await store.accounts.findKey(keyFixture(id).hash)).toBeNull()
        expect(await store.accounts.getKey(id, key.hash)).toEqual(key)
        expect(await store.accounts.getKey(other, key.hash)).toBeNull()

        expect(await store.accounts.updateKey(other, key.hash, { disabled: true })).toBeNull()
        const patched = await store.accounts.updateKey(id, key.hash, {
          disabled: true,
          limit: null,
          allowedModels: null,
          name: 'renamed',
          updatedAt: T0 + 5,
        })
        const { limit: _l, allowedModels: _m, ...rest } = key
        const expected = { ...rest, name: 'renamed', disabled: true, updatedAt: T0 + 5 }
        expect(patched).toEqual(expected)
        expect((await store.accounts.findKey(key.hash))?.key).toEqual(expected)
        expect(await store.accounts.listKeys(id)).toEqual(
          [expected, bare].sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id)),
        )
        // A management key says so.
        const admin = { ...keyFixture(id), management: true }
        await store.accounts.addKey(admin)
        expect((await store.accounts.findKey(admin.hash))?.key.management).toBe(true)
      })

      it('counts a key’s spend from its settled charges: total, and the UTC day, week and month', async () => {
        const { store, id } = await withAccount(usd(10))
        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const charge = async (createdAt: number, cost: bigint) => {
          const r = (await store.ledger.reserve(id, uid('g'), cost, createdAt, MINUTE))!
          const record = generationFixture(uid('gen'), id, { createdAt, cost, keyHash: key.hash })
          expect((await store.ledger.settle(r, record))?.keyHash).toBe(key.hash)
        }
        await charge(T0, usd('0.1'))
        await charge(T0 + 1000, usd('0.2'))
        expect(await store.ledger.keyUsage(id, [key.hash, keyFixture(id).hash], T0 + 2000)).toEqual([
          { total: usd('0.3'), daily: usd('0.3'), weekly: usd('0.3'), monthly: usd('0.3'), held: 0n },
          { total: 0n, daily: 0n, weekly: 0n, monthly: 0n, held: 0n },
        ])
        // The next UTC day: the day starts over, the week and month go on.
        expect((await store.ledger.keyUsage(id, [key.hash], nextDay))[0]).toEqual({
          total: usd('0.3'),
          daily: 0n,
          weekly: usd('0.3'),
          monthly: usd('0.3'),
          held: 0n,
        })
        await charge(nextDay + 10, usd('0.05'))
        expect((await store.ledger.keyUsage(id, [key.hash], nextDay + 20))[0]).toMatchObject({
          total: usd('0.35'),
          daily: usd('0.05'),
          weekly: usd('0.35'),
        })
        // A late record of the day before counts in the total and the week, not in today.
        await charge(T0 + 3000, usd('0.01'))
        expect((await store.ledger.keyUsage(id, [key.hash], nextDay + 30))[0]).toMatchObject({
          total: usd('0.36'),
          daily: usd('0.05'),
          weekly: usd('0.36'),
        })
        expect((await store.ledger.keyUsage(id, [key.hash], nextWeek))[0]).toMatchObject({
          weekly: 0n,
          monthly: usd('0.36'),
        })
        expect((await store.ledger.keyUsage(id, [key.hash], nextMonth))[0]).toMatchObject({
          total: usd('0.36'),
          daily: 0n,
          weekly: 0n,
          monthly: 0n,
        })
        // The key's records, and only they, by key.
        const r = (await store.ledger.reserve(id, 'nokey', 1n, T0, MINUTE))!
        await store.ledger.settle(r, generationFixture(uid('gen'), id, { cost: 1n }))
        const mine = await store.generations.listByAccount(id, { limit: 2, keyHash: key.hash })
        expect(mine.data.map((g) => g.keyHash)).toEqual([key.hash, key.hash])
        const rest = await store.generations.listByAccount(id, {
          limit: 10,
          keyHash: key.hash,
          before: mine.nextCursor!,
        })
        expect(rest.data).toHaveLength(2)
        expect((await store.generations.listByAccount(id, { limit: 10 })).data).toHaveLength(5)
      })

      it('holds at most what the key has left, refuses it when nothing is, and the balance still applies', async () => {
        const { store, id } = await withAccount(usd(1))
        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const hold = { hash: key.hash, limit: usd('0.01'), limitReset: null }
        const a = await store.ledger.reserveForKey(id, 'a', usd('0.006'), T0, MINUTE, hold)
        expect(a).toEqual({
          reservation: { id: 'a', accountId: id, amount: usd('0.006'), expiresAt: T0 + MINUTE },
          keyLimited: false,
        })
        const b = await store.ledger.reserveForKey(id, 'b', usd('0.006'), T0, MINUTE, hold)
        expect(b.reservation?.amount).toBe(usd('0.004'))
        expect(await store.ledger.reserveForKey(id, 'c', 1n, T0, MINUTE, hold)).toEqual({
          reservation: null,
          keyLimited: true,
        })
        expect((await store.ledger.keyUsage(id, [key.hash], T0))[0]?.held).toBe(usd('0.01'))
        // Another key, or a request without a limit, is held from the balance alone.
        expect(
          (
            await store.ledger.reserveForKey(id, 'd', usd('0.5'), T0, MINUTE, {
              hash: keyFixture(id).hash,
              limit: null,
              limitReset: null,
            })
          ).reservation?.amount,
        ).toBe(usd('0.5'))
        // Settled at its actual cost, a hold frees the rest of the key's room.
        await store.ledger.settle(
          a.reservation!,
          generationFixture('gen-a-' + id, id, { createdAt: T0, cost: usd('0.002') }),
        )
        expect(
          (await store.ledger.reserveForKey(id, 'e', usd(1), T0, MINUTE, hold)).reservation?.amount,
        ).toBe(usd('0.004'))
        // An account with nothing left is refused as such, whatever the key has.
        const poor = await withAccount(0n)
        const pk = keyFixture(poor.id)
        await poor.store.accounts.addKey(pk)
        expect(
          await poor.store.ledger.reserveForKey(poor.id, 'x', 1n, T0, MINUTE, { ...hold, hash: pk.hash }),
        ).toEqual({
          reservation: null,
          keyLimited: false,
        })
        // The balance is the smaller bound: both apply.
        const small = await withAccount(usd('0.003'))
        const sk = keyFixture(small.id)
        await small.store.accounts.addKey(sk)
        expect(
          (
            await small.store.ledger.reserveForKey(small.id, 'y', usd(1), T0, MINUTE, {
              ...hold,
              hash: sk.hash,
            })
          ).reservation?.amount,
        ).toBe(usd('0.003'))
      })

      it('a settle without a key takes its hold’s: the key is charged and named on the record', async () => {
        const { store, id } = await withAccount(usd(1))
        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const hold = { hash: key.hash, limit: usd('0.01'), limitReset: null }
        const { reservation } = await store.ledger.reserveForKey(id, 'task', usd('0.004'), T0, MINUTE, hold)
        const record = generationFixture('task-' + id, id, { createdAt: T0, cost: usd('0.003') })
        await store.ledger.settle(reservation!, record)
        expect((await store.generations.get(record.generationId))?.keyHash).toBe(key.hash)
        expect((await store.ledger.keyUsage(id, [key.hash], T0))[0]).toMatchObject({
          total: usd('0.003'),
          held: 0n,
        })
      })

      it('concurrent reserves against a key’s limit hold exactly what fits', async () => {
        const { store, id } = await withAccount(usd(100))
        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const each = usd('0.001')
        const hold = { hash: key.hash, limit: each * 7n, limitReset: 'daily' as const }
        const results = await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            store.ledger.reserveForKey(id, `k${i}`, each, T0, MINUTE, hold),
          ),
        )
        const held = results.filter((r) => r.reservation !== null)
        expect(held).toHaveLength(7)
        expect(held.every((r) => r.reservation!.amount === each)).toBe(true)
        expect(results.filter((r) => r.keyLimited)).toHaveLength(23)
        expect((await store.ledger.keyUsage(id, [key.hash], T0))[0]?.held).toBe(each * 7n)
        // Through admission too (rate limits and the hold in one step): nothing more fits.
        const more = await Promise.all(
          Array.from({ length: 5 }, (_, i) =>
            store.admission.reserve([], MINUTE, id, `m${i}`, each, T0, MINUTE, hold),
          ),
        )
        expect(more.every((r) => r.reservation === null && r.keyLimited === true)).toBe(true)
      })

      it('a daily limit starts over at 00:00 UTC on the caller’s clock', async () => {
        const { store, id } = await withAccount(usd(1))
        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const hold = { hash: key.hash, limit: usd('0.01'), limitReset: 'daily' as const }
        const { reservation } = await store.ledger.reserveForKey(id, 'd1', usd('0.01'), T0, MINUTE, hold)
        await store.ledger.settle(
          reservation!,
          generationFixture('d1-' + id, id, { createdAt: T0, cost: usd('0.01'), keyHash: key.hash }),
        )
        expect((await store.ledger.reserveForKey(id, 'd2', 1n, nextDay - 1, MINUTE, hold)).keyLimited).toBe(
          true,
        )
        const next = await store.ledger.reserveForKey(id, 'd3', usd(1), nextDay, MINUTE, hold)
        expect(next.reservation?.amount).toBe(usd('0.01'))
        // Without a reset the same spend counts for ever.
        expect(
          (await store.ledger.reserveForKey(id, 'd4', 1n, nextMonth, MINUTE, { ...hold, limitReset: null }))
            .keyLimited,
        ).toBe(true)
      })
    })

    describe('applied config', () => {
      it('keeps the last snapshot per account, replaced by the next', async () => {
        const store = await open()
        // Every backend keeps it: without it a restart would undo the admin API's changes.
        expect(store.appliedConfig).toBeDefined()
        const applied = store.appliedConfig!
        const a = uid('acct')
        const b = uid('acct')
        expect(await applied.get(a)).toBeNull()
        await applied.set(a, '{"name":"one"}')
        await applied.set(b, '{"name":"other"}')
        await applied.set(a, '{"name":"two"}')
        expect(await applied.get(a)).toBe('{"name":"two"}')
        expect(await applied.get(b)).toBe('{"name":"other"}')
      })
    })

    describe('ledger', () => {
      it('adds credits, also negative amounts', async () => {
        const { store, id } = await withAccount(usd(5))
        expect(await store.ledger.addCredits(id, usd('0.5'), 0)).toEqual({
          totalCredits: usd('5.5'),
          totalUsage: 0n,
          reserved: 0n,
        })
        await store.ledger.addCredits(id, usd(-2), 0)
        expect((await store.ledger.credits(id, 0)).totalCredits).toBe(usd('3.5'))
      })

      it('reports zeros for an unknown account and refuses to reserve for it', async () => {
        const store = await open()
        const id = uid('missing')
        expect(await store.ledger.credits(id, 0)).toEqual({ totalCredits: 0n, totalUsage: 0n, reserved: 0n })
        expect(await store.ledger.reserve(id, uid('g'), 1n, 0, 1000)).toBeNull()
      })

      it('reserves up to what is available and refuses when nothing is left', async () => {
        const { store, id } = await withAccount(usd(1))
        const r1 = await store.ledger.reserve(id, 'g1', usd('0.6'), 0, 1000)
        expect(r1).toEqual({ id: 'g1', accountId: id, amount: usd('0.6'), expiresAt: 1000 })
        // Only 0.4 is left: the next reservation is capped to it.
        const r2 = await store.ledger.reserve(id, 'g2', usd('0.6'), 0, 1000)
        expect(r2?.amount).toBe(usd('0.4'))
        expect(await store.ledger.reserve(id, 'g3', 1n, 0, 1000)).toBeNull()
        expect(await store.ledger.credits(id, 0)).toEqual({
          totalCredits: usd(1),
          totalUsage: 0n,
          reserved: usd(1),
        })

        const empty = await withAccount(0n)
        expect(await empty.store.ledger.reserve(empty.id, 'g1', 1n, 0, 1000)).toBeNull()
      })

      it('sums the open holds exactly, also past 64 bits and with amounts of any width', async () => {
        // $10^10 of credits: holds of 19 digits of picodollars (wider than a 64-bit integer's 18
        // safe digits), then many of 18 digits whose sum passes 2^63.
        const { store, id } = await withAccount(usd(10_000_000_000))
        const wide = 1_234_567_890_123_456_789n
        const near = 999_999_999_999_999_999n
        for (let i = 0; i < 10; i++)
          expect((await store.ledger.reserve(id, `n${i}`, near, 0, 1000))?.amount).toBe(near)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(10n * near)
        expect(10n * near > 2n ** 63n).toBe(true)
        expect((await store.ledger.reserve(id, 'w', wide, 0, 1000))?.amount).toBe(wide)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(10n * near + wide)
        for (let i = 0; i < 10; i++) await store.ledger.release({ id: `n${i}`, accountId: id })
        expect((await store.ledger.credits(id, 0)).reserved).toBe(wide)
        expect((await store.ledger.reserve(id, 's', 7n, 0, 1000))?.amount).toBe(7n)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(wide + 7n)
        await store.ledger.release({ id: 'w', accountId: id })
        expect((await store.ledger.credits(id, 0)).reserved).toBe(7n)
        // Expired holds do not count.
        expect((await store.ledger.credits(id, 1000)).reserved).toBe(0n)
      })

      it('refuses when usage took the balance below zero', async () => {
        // Only an overdraft lets a charge take the balance below zero.
        const store = await open()
        const id = uid('acct')
        await store.accounts.create(accountFixture(id, { overdraft: usd(1) }), usd(1))
        await store.ledger.settle(
          { id: 'g1', accountId: id },
          generationFixture(uid('g'), id, { cost: usd(2) }),
        )
        expect(await store.ledger.reserve(id, 'g2', 1n, 0, 1000)).toBeNull()
        await store.ledger.addCredits(id, usd(1), 0)
        expect(await store.ledger.reserve(id, 'g2', 1n, 0, 1000)).toBeNull()
        await store.ledger.addCredits(id, 1n, 0)
        expect((await store.ledger.reserve(id, 'g2', usd(1), 0, 1000))?.amount).toBe(1n)
      })

      it('admits exactly as many concurrent reservations as the credits cover', async () => {
        const each = usd('0.25')
        const { store, id } = await withAccount(each * 20n)
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) => store.ledger.reserve(id, `g${i}`, each, 0, MINUTE)),
        )
        const admitted = results.filter((r) => r !== null)
        expect(admitted).toHaveLength(20)
        expect(admitted.every((r) => r.amount === each)).toBe(true)
        expect(new Set(admitted.map((r) => r.id)).size).toBe(20)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(each * 20n)
      })

      it('lets reservations expire by the caller’s now', async () => {
        const { store, id } = await withAccount(usd(1))
        await store.ledger.reserve(id, 'g1', usd(1), 0, 1000)
        expect((await store.ledger.credits(id, 999)).reserved).toBe(usd(1))
        expect(await store.ledger.reserve(id, 'g2', 1n, 999, 1000)).toBeNull()
        expect((await store.ledger.credits(id, 1000)).reserved).toBe(0n)
        expect((await store.ledger.reserve(id, 'g2', usd(1), 1000, 1000))?.amount).toBe(usd(1))
      })

      it('sweep drops what expired and keeps what is open, windows included', async () => {
        const { store, id } = await withAccount(usd(2))
        await store.ledger.reserve(id, 'old', usd(1), 0, 1000)
        await store.ledger.reserve(id, 'open', usd(0.5), 0, 10_000)
        const key = uid('rpm')
        await store.rateLimits.consume([{ key, amount: 1, limit: 1 }], 60_000, 0)
        await store.sweep(5_000)
        expect((await store.ledger.credits(id, 5_000)).reserved).toBe(usd(0.5))
        expect(await store.ledger.renew({ id: 'old', accountId: id }, 5_000, 1000)).toBe(false)
        expect(await store.ledger.renew({ id: 'open', accountId: id }, 5_000, 10_000)).toBe(true)
        // The window is still current: the limit still holds after a sweep.
        expect((await store.rateLimits.consume([{ key, amount: 1, limit: 1 }], 60_000, 5_000)).allowed).toBe(
          false,
        )
        await store.sweep(200_000)
        expect(
          (await store.rateLimits.consume([{ key, amount: 1, limit: 1 }], 60_000, 200_000)).allowed,
        ).toBe(true)
      })

      it('renews an open reservation, and not one that expired, was settled or released', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd(1), 0, 1000))!
        expect(await store.ledger.renew(r, 900, 1000)).toBe(true)
        // Held past its first expiry.
        expect((await store.ledger.credits(id, 1500)).reserved).toBe(usd(1))
        expect(await store.ledger.reserve(id, 'g2', 1n, 1500, 1000)).toBeNull()
        expect(await store.ledger.renew(r, 1900, 1000)).toBe(false)
        expect((await store.ledger.credits(id, 1900)).reserved).toBe(0n)

        const settled = (await store.ledger.reserve(id, 'g3', usd('0.1'), 2000, 1000))!
        await store.ledger.settle(settled, generationFixture(uid('g'), id))
        expect(await store.ledger.renew(settled, 2100, 1000)).toBe(false)
        const released = (await store.ledger.reserve(id, 'g4', usd('0.1'), 2000, 1000))!
        await store.ledger.release(released)
        expect(await store.ledger.renew(released, 2100, 1000)).toBe(false)
        expect(await store.ledger.renew({ id: 'never', accountId: id }, 2100, 1000)).toBe(false)
      })

      it('settles the charge and the record together, once per generation id', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 1000))!
        const record = generationFixture(uid('gen'), id, { cost: usd('0.1') })
        expect(await store.ledger.settle(r, record)).toEqual(record)
        expect(await store.ledger.credits(id, 0)).toEqual({
          totalCredits: usd(1),
          totalUsage: usd('0.1'),
          reserved: 0n,
        })
        expect(await store.generations.get(record.generationId)).toEqual(record)

        // A repeat changes nothing: no second charge, the first record stays, another hold stays.
        const other = (await store.ledger.reserve(id, 'g2', usd('0.2'), 0, 1000))!
        expect(await store.ledger.settle(other, { ...record, cost: usd('0.3') })).toBeNull()
        expect(await store.ledger.credits(id, 0)).toEqual({
          totalCredits: usd(1),
          totalUsage: usd('0.1'),
          reserved: usd('0.2'),
        })
        expect(await store.generations.get(record.generationId)).toEqual(record)
        expect((await store.generations.listByAccount(id, { limit: 10 })).data).toHaveLength(1)
      })

      it('keeps the record’s attempt list as written', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 1000))!
        const attempts = [
          {
            provider: 'alpha',
            deployment: 'alpha',
            model: 'team/chat',
            status: 503,
            outcome: 'upstream_error',
            startedAt: 1_700_000_000_000,
            durationMs: 12,
          },
          {
            provider: 'beta',
            deployment: 'beta#2',
            model: 'team/other',
            status: null,
            outcome: 'ok',
            startedAt: 1_700_000_000_020,
            durationMs: 30,
          },
        ]
        const record = generationFixture(uid('gen'), id, { attempts })
        expect(await store.ledger.settle(r, record)).toEqual(record)
        expect((await store.generations.get(record.generationId))?.attempts).toEqual(attempts)
      })

      it('charges a request that outlived its hold, or never had one', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 1000))!
        expect((await store.ledger.credits(id, 5000)).reserved).toBe(0n)
        expect(
          await store.ledger.settle(r, generationFixture(uid('gen'), id, { cost: usd('0.7') })),
        ).not.toBeNull()
        const unknown = { id: 'never-reserved', accountId: id }
        expect(
          await store.ledger.settle(unknown, generationFixture(uid('gen'), id, { cost: usd('0.2') })),
        ).not.toBeNull()
        expect(await store.ledger.credits(id, 5000)).toEqual({
          totalCredits: usd(1),
          totalUsage: usd('0.9'),
          reserved: 0n,
        })
        expect((await store.generations.listByAccount(id, { limit: 10 })).data).toHaveLength(2)
      })

      it('a hold that expired is no longer room of its own: its charge is bounded by what others left', async () => {
        const { store, id } = await withAccount(usd(1))
        const r1 = (await store.ledger.reserve(id, 'e1', usd('0.5'), 0, 1000))!
        // Past its expiry (not swept yet) the first hold no longer counts: the second takes all the credits.
        const r2 = (await store.ledger.reserve(id, 'e2', usd(1), 5000, MINUTE))!
        expect(r2.amount).toBe(usd(1))
        const late = generationFixture(uid('gen'), id, { cost: usd('0.4') })
        const charged = await store.ledger.settle(r1, late, { held: usd('0.5'), now: 5000 })
        expect(charged?.cost).toBe(0n)
        expect(charged?.unbilledOverage?.usd).toBe(usd('0.4'))
        expect(await store.ledger.credits(id, 5000)).toEqual({
          totalCredits: usd(1),
          totalUsage: 0n,
          reserved: usd(1),
        })
      })

      it('charges at most the hold; the rest is recorded as unbilled overage, tokens pro rata', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd('0.1'), 0, MINUTE))!
        // 20 015 tokens priced at $2 where $0.1 was held: $1.9 of it, 95 % of the tokens, unbilled.
        const usage = { ...generationFixture('x', id).usage, total_tokens: 20_015 }
        const input = generationFixture(uid('gen'), id, { cost: usd(2), usage })
        const charged = await store.ledger.settle(r, input, { held: usd('0.1'), now: 10 })
        expect(charged).toEqual({
          ...input,
          cost: usd('0.1'),
          unbilledOverage: { usd: usd('1.9'), tokens: 19_014 },
        })
        expect(await store.generations.get(input.generationId)).toEqual(charged)
        expect(await store.ledger.credits(id, 10)).toEqual({
          totalCredits: usd(1),
          totalUsage: usd('0.1'),
          reserved: 0n,
        })
        // Without `held`, the hold's own amount caps it; a record within the bound is kept as it is.
        const r2 = (await store.ledger.reserve(id, 'g2', usd('0.2'), 0, MINUTE))!
        const over = generationFixture(uid('gen'), id, { cost: usd('0.5') })
        expect((await store.ledger.settle(r2, over, { now: 10 }))?.cost).toBe(usd('0.2'))
        const r3 = (await store.ledger.reserve(id, 'g3', usd('0.2'), 0, MINUTE))!
        const within = generationFixture(uid('gen'), id, { cost: usd('0.15') })
        expect(await store.ledger.settle(r3, within, { now: 10 })).toEqual(within)
        expect((await store.ledger.credits(id, 10)).totalUsage).toBe(usd('0.45'))
      })

      it('a hold larger than its request (taken ahead) caps the charge at what the request held, and goes whole', async () => {
        const { store, id } = await withAccount(usd(1))
        // billing/spare-holds.ts: a hold reserved ahead under its own id, taken by a request bound to $0.2.
        const ahead = (await store.ledger.reserve(id, uid('spare'), usd('0.5'), 0, MINUTE))!
        const taker = { ...ahead, amount: usd('0.2') }
        const over = generationFixture(uid('gen'), id, { cost: usd('0.3') })
        const charged = await store.ledger.settle(taker, over, { held: taker.amount, now: 10 })
        expect(charged?.cost).toBe(usd('0.2'))
        expect(charged?.unbilledOverage?.usd).toBe(usd('0.1'))
        expect(await store.ledger.credits(id, 10)).toEqual({
          totalCredits: usd(1),
          totalUsage: usd('0.2'),
          reserved: 0n,
        })
        // Within what it held, the record is charged as it came, and its hold goes too.
        const next = (await store.ledger.reserve(id, uid('spare'), usd('0.5'), 10, MINUTE))!
        const within = generationFixture(uid('gen'), id, { cost: usd('0.15') })
        expect(await store.ledger.settle(next, within, { held: usd('0.2'), now: 10 })).toEqual(within)
        expect((await store.ledger.credits(id, 10)).reserved).toBe(0n)
        expect((await store.ledger.credits(id, 10)).totalUsage).toBe(usd('0.35'))
      })

      it('an overdraft lets a charge pass its hold by that much, and the balance never below it', async () => {
        const store = await open()
        const id = uid('acct')
        await store.accounts.create(accountFixture(id, { overdraft: usd('0.3') }), usd(1))
        expect((await store.accounts.get(id))?.overdraft).toBe(usd('0.3'))
        const a = (await store.ledger.reserve(id, 'a', usd('0.5'), 0, MINUTE))!
        const b = (await store.ledger.reserve(id, 'b', usd('0.5'), 0, MINUTE))!
        expect(await store.ledger.reserve(id, 'c', usd('0.5'), 0, MINUTE)).toBeNull()
        const big = () => generationFixture(uid('gen'), id, { cost: usd(5) })
        // a: its hold plus the overdraft.
        expect((await store.ledger.settle(a, big(), { held: a.amount, now: 10 }))?.cost).toBe(usd('0.8'))
        // b: only what keeps the balance at −overdraft, less than its hold plus the overdraft.
        const second = await store.ledger.settle(b, big(), { held: b.amount, now: 10 })
        expect(second?.cost).toBe(usd('0.5'))
        expect(second?.unbilledOverage?.usd).toBe(usd('4.5'))
        const c = await store.ledger.credits(id, 10)
        expect(c.totalCredits - c.totalUsage).toBe(-usd('0.3'))
        // Nothing more can be admitted or charged below it.
        expect(await store.ledger.reserve(id, 'd', usd('0.5'), 10, MINUTE)).toBeNull()
        const late = await store.ledger.settle({ id: 'gone', accountId: id }, big(), { now: 10 })
        expect(late?.cost).toBe(0n)
        const end = await store.ledger.credits(id, 10)
        expect(end.totalCredits - end.totalUsage).toBe(-usd('0.3'))
        // The overdraft is changed like any other field, and 0 reads back as none.
        expect((await store.accounts.update(id, { overdraft: usd('0.05') }))?.overdraft).toBe(usd('0.05'))
        expect((await store.accounts.get(id))?.overdraft).toBe(usd('0.05'))
        expect(await store.accounts.update(id, { overdraft: 0n })).not.toHaveProperty('overdraft')
        expect(await store.accounts.get(id)).not.toHaveProperty('overdraft')
      })

      it('release frees the hold; releasing again or an unknown one is harmless', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd(1), 0, 1000))!
        await store.ledger.release(r)
        await store.ledger.release(r)
        await store.ledger.release({ id: 'never', accountId: id })
        expect(await store.ledger.credits(id, 0)).toEqual({
          totalCredits: usd(1),
          totalUsage: 0n,
          reserved: 0n,
        })
        expect((await store.ledger.reserve(id, 'g2', usd(1), 0, 1000))?.amount).toBe(usd(1))
      })

      it('keeps 5e9 USD of credits and a usage of one picodollar exact', async () => {
        const big = usd('5000000000')
        const { store, id } = await withAccount(big)
        const record = generationFixture(uid('gen'), id, { upstreamCost: big + 1n, discount: big, cost: 1n })
        await store.ledger.settle({ id: 'g1', accountId: id }, record)
        const c = await store.ledger.credits(id, 0)
        expect(c).toEqual({ totalCredits: 5_000_000_000_000_000_000_000n, totalUsage: 1n, reserved: 0n })
        expect(c.totalCredits - c.totalUsage).toBe(4_999_999_999_999_999_999_999n)
        expect(await store.generations.get(record.generationId)).toEqual(record)
        // The whole balance can be reserved, to the picodollar.
        expect((await store.ledger.reserve(id, 'g2', big * 2n, 0, 1000))?.amount).toBe(big - 1n)
        await store.ledger.release({ id: 'g2', accountId: id })
        expect((await store.ledger.addCredits(id, big, 0)).totalCredits).toBe(big * 2n)
      })
    })

    describe('generations', () => {
      it('pages an account’s records newest first with a cursor', async () => {
        const { store, id } = await withAccount(usd(1))
        const other = uid('acct')
        await store.accounts.create(accountFixture(other), usd(1))
        const ids = [1, 2, 3, 4, 5].map((i) => uid(`g${i}`))
        for (const [i, g] of ids.entries()) {
          await store.ledger.settle(
            { id: g, accountId: id },
            generationFixture(g, id, { createdAt: 1000 + i }),
          )
        }
        const foreign = uid('g')
        await store.ledger.settle({ id: foreign, accountId: other }, generationFixture(foreign, other))

        const p1 = await store.generations.listByAccount(id, { limit: 2 })
        expect(p1.data.map((r) => r.generationId)).toEqual([ids[4], ids[3]])
        const p2 = await store.generations.listByAccount(id, { limit: 2, before: p1.nextCursor! })
        expect(p2.data.map((r) => r.generationId)).toEqual([ids[2], ids[1]])
        const p3 = await store.generations.listByAccount(id, { limit: 2, before: p2.nextCursor! })
        expect(p3.data.map((r) => r.generationId)).toEqual([ids[0]])
        expect(p3.nextCursor).toBeNull()

        expect((await store.generations.listByAccount(id, { limit: 5 })).nextCursor).toBeNull()
        expect(await store.generations.listByAccount(id, { limit: 2, before: uid('unknown') })).toEqual({
          data: [],
          nextCursor: null,
        })
        expect(
          (await store.generations.listByAccount(other, { limit: 10 })).data.map((r) => r.generationId),
        ).toEqual([foreign])
        expect(await store.generations.listByAccount(uid('missing'), { limit: 10 })).toEqual({
          data: [],
          nextCursor: null,
        })
        expect(await store.generations.get(uid('missing'))).toBeNull()
      })

      it('filters a listing by model, paging within the filter', async () => {
        const { store, id } = await withAccount(usd(1))
        const models = ['a/x', 'b/y', 'a/x', 'b/y', 'a/x']
        const ids = models.map((_, i) => uid(`g${i}`))
        for (const [i, g] of ids.entries()) {
          await store.ledger.settle({ id: g, accountId: id }, generationFixture(g, id, { model: models[i]! }))
        }
        const p1 = await store.generations.listByAccount(id, { limit: 2, model: 'a/x' })
        expect(p1.data.map((r) => r.generationId)).toEqual([ids[4], ids[2]])
        const p2 = await store.generations.listByAccount(id, {
          limit: 2,
          model: 'a/x',
          before: p1.nextCursor!,
        })
        expect(p2).toEqual({ data: [expect.objectContaining({ generationId: ids[0] })], nextCursor: null })
        const ys = await store.generations.listByAccount(id, { limit: 10, model: 'b/y' })
        expect(ys.data.map((r) => r.generationId)).toEqual([ids[3], ids[1]])
        expect((await store.generations.listByAccount(id, { limit: 10, model: 'c/z' })).data).toEqual([])
      })

      it('sums spend per UTC day and model exactly, within the range, for the account only', async () => {
        const { store, id } = await withAccount(10n ** 23n)
        const other = uid('acct')
        await store.accounts.create(accountFixture(other), usd(1))
        const day = 86_400_000
        const d0 = 1_700_006_400_000 // a UTC midnight
        expect(d0 % day).toBe(0)
        // 10^21 picodollars and one: a sum beyond 64 bits must stay exact.
        const big = 10n ** 21n
        const records: [number, string, bigint, bigint][] = [
          [d0 - 1, 'a/x', 1n, 2n], // the day before the range
          [d0, 'a/x', 3_000_000n, 4_000_000n],
          [d0 + day - 1, 'a/x', 5n, 7n],
          [d0 + 1000, 'b/y', big, big + 1n],
          [d0 + 2000, 'b/y', big + 1n, big + 2n],
          [d0 + day, 'a/x', 11n, 13n],
          [d0 + 2 * day, 'a/x', 17n, 19n], // at `until`: outside
        ]
        for (const [i, [createdAt, model, cost, upstreamCost]] of records.entries()) {
          const g = uid(`g${i}`)
          await store.ledger.settle(
            { id: g, accountId: id },
            generationFixture(g, id, { createdAt, model, cost, upstreamCost, discount: upstreamCost - cost }),
          )
        }
        const foreign = uid('g')
        await store.ledger.settle(
          { id: foreign, accountId: other },
          generationFixture(foreign, other, { createdAt: d0 }),
        )

        const rows = await store.generations.activity(id, d0, d0 + 2 * day)
        const base = { promptTokens: 0, completionTokens: 0 }
        expect(rows.map((r) => ({ ...r, ...base }))).toEqual([
          { day: d0, model: 'a/x', requests: 2, cost: 3_000_005n, upstreamCost: 4_000_007n, ...base },
          { day: d0, model: 'b/y', requests: 2, cost: 2n * big + 1n, upstreamCost: 2n * big + 3n, ...base },
          { day: d0 + day, model: 'a/x', requests: 1, cost: 11n, upstreamCost: 13n, ...base },
        ])
        expect(rows.map((r) => [r.promptTokens, r.completionTokens])).toEqual([
          [20, 10],
          [20, 10],
          [10, 5],
        ])
        expect(await store.generations.activity(id, d0 + 3 * day, d0 + 4 * day)).toEqual([])
        expect((await store.generations.activity(other, d0, d0 + day)).map((r) => r.requests)).toEqual([1])
      })
    })

    describe('rate limits', () => {
      it('counts within a window, refuses past the limit, and slides', async () => {
        const store = await open()
        const k = uid('rpm')
        const one = (t: number) => store.rateLimits.consume([{ key: k, amount: 1, limit: 2 }], MINUTE, t)
        expect(await one(0)).toEqual({
          allowed: true,
          decisions: [{ allowed: true, limit: 2, remaining: 1, resetAt: MINUTE }],
        })
        expect((await one(1)).decisions[0]!.remaining).toBe(0)
        expect(await one(2)).toEqual({
          allowed: false,
          decisions: [{ allowed: false, limit: 2, remaining: 0, resetAt: MINUTE }],
        })
        // Half-way through the next window the previous one still weighs half: 2 × 0.5 = 1 used.
        expect((await one(MINUTE + MINUTE / 2)).allowed).toBe(true)
        expect((await one(MINUTE + MINUTE / 2)).allowed).toBe(false)
        // Two windows later nothing of it is left.
        expect((await one(3 * MINUTE)).decisions[0]!.remaining).toBe(1)
      })

      it('is all-or-nothing across checks', async () => {
        const store = await open()
        const a = uid('rpm')
        const b = uid('tpm')
        const refused = await store.rateLimits.consume(
          [
            { key: a, amount: 1, limit: 1 },
            { key: b, amount: 5, limit: 3 },
          ],
          MINUTE,
          0,
        )
        expect(refused.allowed).toBe(false)
        expect(refused.decisions.map((d) => d.allowed)).toEqual([true, false])
        expect(refused.decisions.map((d) => d.limit)).toEqual([1, 3])

        // Nothing was counted: `a` still has its one unit, `b` its three.
        const both = await store.rateLimits.consume(
          [
            { key: a, amount: 1, limit: 1 },
            { key: b, amount: 3, limit: 3 },
          ],
          MINUTE,
          1,
        )
        expect(both).toEqual({
          allowed: true,
          decisions: [
            { allowed: true, limit: 1, remaining: 0, resetAt: MINUTE },
            { allowed: true, limit: 3, remaining: 0, resetAt: MINUTE },
          ],
        })
        // Both were counted.
        expect((await store.rateLimits.consume([{ key: a, amount: 1, limit: 1 }], MINUTE, 2)).allowed).toBe(
          false,
        )
        expect((await store.rateLimits.consume([{ key: b, amount: 1, limit: 3 }], MINUTE, 2)).allowed).toBe(
          false,
        )
        expect(await store.rateLimits.consume([], MINUTE, 2)).toEqual({ allowed: true, decisions: [] })
      })

      it('admits exactly the limit of concurrent consumes', async () => {
        const store = await open()
        const k = uid('rpm')
        const results = await Promise.all(
          Array.from({ length: 30 }, () =>
            store.rateLimits.consume([{ key: k, amount: 1, limit: 12 }], MINUTE, 0),
          ),
        )
        expect(results.filter((r) => r.allowed)).toHaveLength(12)
      })

      it('adjust corrects an estimate, both ways', async () => {
        const store = await open()
        const t = uid('tpm')
        const take = (amount: number) => store.rateLimits.consume([{ key: t, amount, limit: 100 }], MINUTE, 0)
        await take(90)
        await store.rateLimits.adjust(t, -80, MINUTE, 0)
        expect((await take(85)).allowed).toBe(true)
        // 95 used: 6 more do not fit. Raised by 3 to 98, 3 do not fit and 2 do.
        expect((await take(6)).allowed).toBe(false)
        await store.rateLimits.adjust(t, 3, MINUTE, 0)
        expect((await take(3)).allowed).toBe(false)
        expect((await take(2)).allowed).toBe(true)
      })
    })

    describe('admission', () => {
      const TTL = 60_000

      it('beforeBody counts the limit and says whether anything is left to hold', async () => {
        const { store, id } = await withAccount(usd(1))
        const k = uid('rpm')
        const check = [{ key: k, amount: 1, limit: 2 }]
        expect(await store.admission.beforeBody(id, check, MINUTE, 0, true)).toEqual({
          allowed: true,
          decisions: [{ allowed: true, limit: 2, remaining: 1, resetAt: MINUTE }],
          hasCredits: true,
        })
        // Credits not asked for: not answered.
        expect((await store.admission.beforeBody(id, check, MINUTE, 1, false)).hasCredits).toBeNull()
        // Past the limit: refused, nothing more is looked at.
        expect(await store.admission.beforeBody(id, check, MINUTE, 2, true)).toEqual({
          allowed: false,
          decisions: [{ allowed: false, limit: 2, remaining: 0, resetAt: MINUTE }],
          hasCredits: null,
        })
        // No limits: only the credits; an open hold of everything leaves nothing.
        expect(await store.admission.beforeBody(id, [], MINUTE, 3, true)).toEqual({
          allowed: true,
          decisions: [],
          hasCredits: true,
        })
        expect(await store.ledger.reserve(id, 'all', usd(5), 3, TTL)).not.toBeNull()
        expect((await store.admission.beforeBody(id, [], MINUTE, 4, true)).hasCredits).toBe(false)
        // ... and a request refused for credits still counted in the limit.
        const other = uid('rpm')
        const refused = await store.admission.beforeBody(
          id,
          [{ key: other, amount: 1, limit: 1 }],
          MINUTE,
          4,
          true,
        )
        expect(refused).toMatchObject({ allowed: true, hasCredits: false })
        expect(
          (await store.rateLimits.consume([{ key: other, amount: 1, limit: 1 }], MINUTE, 5)).allowed,
        ).toBe(false)
        // An unknown account has nothing, with limits or without.
        expect((await store.admission.beforeBody(uid('nobody'), [], MINUTE, 5, true)).hasCredits).toBe(false)
        const anyLimit = [{ key: uid('rpm'), amount: 1, limit: 5 }]
        expect(await store.admission.beforeBody(uid('nobody'), anyLimit, MINUTE, 5, true)).toMatchObject({
          allowed: true,
          hasCredits: false,
        })
      })

      it('reserve holds only when the limits allow it, and a refused hold still counts', async () => {
        const { store, id } = await withAccount(usd(2))
        const t = uid('tpm')
        const refused = await store.admission.reserve(
          [{ key: t, amount: 50, limit: 40 }],
          MINUTE,
          id,
          'g0',
          usd(1),
          0,
          TTL,
        )
        expect(refused).toEqual({
          allowed: false,
          decisions: [{ allowed: false, limit: 40, remaining: 40, resetAt: MINUTE }],
          reservation: null,
        })
        expect((await store.ledger.credits(id, 0)).reserved).toBe(0n)

        const held = await store.admission.reserve(
          [{ key: t, amount: 30, limit: 40 }],
          MINUTE,
          id,
          'g1',
          usd(1),
          0,
          TTL,
        )
        expect(held).toEqual({
          allowed: true,
          decisions: [{ allowed: true, limit: 40, remaining: 10, resetAt: MINUTE }],
          reservation: { id: 'g1', accountId: id, amount: usd(1), expiresAt: TTL },
        })
        // No limits: a plain hold, capped at what is left.
        expect(
          (await store.admission.reserve([], MINUTE, id, 'g2', usd(5), 1, TTL)).reservation?.amount,
        ).toBe(usd(1))
        expect((await store.ledger.credits(id, 1)).reserved).toBe(usd(2))
        // Nothing left: no hold, but the tokens were counted.
        const broke = await store.admission.reserve(
          [{ key: t, amount: 5, limit: 40 }],
          MINUTE,
          id,
          'g3',
          usd(1),
          2,
          TTL,
        )
        expect(broke).toMatchObject({ allowed: true, reservation: null })
        expect(broke.decisions[0]!.remaining).toBe(5)
        expect(
          (await store.admission.reserve([], MINUTE, uid('nobody'), 'g4', usd(1), 2, TTL)).reservation,
        ).toBeNull()
      })

      it('concurrent reserves each hold what they asked for, refused checks or none', async () => {
        const { store, id } = await withAccount(usd(100))
        const asks = [1, 2, 3, 4, 5, 6].map((n) => usd(`0.0${n}`))
        // One batch on the SQL backends: every call fits (held as given), then one whose check refuses.
        const whole = await Promise.all(
          asks.map((ask, i) => store.admission.reserve([], MINUTE, id, `w${i}`, ask, 0, TTL)),
        )
        expect(whole.map((r) => [r.reservation?.id, r.reservation?.amount])).toEqual(
          asks.map((ask, i) => [`w${i}`, ask]),
        )
        const r = uid('rpm')
        const some = await Promise.all(
          asks.map((ask, i) =>
            store.admission.reserve([{ key: r, amount: 1, limit: 4 }], MINUTE, id, `s${i}`, ask, 0, TTL),
          ),
        )
        expect(some.map((x) => x.allowed)).toEqual([true, true, true, true, false, false])
        expect(some.map((x) => [x.reservation?.id, x.reservation?.amount])).toEqual(
          asks.map((ask, i) => (i < 4 ? [`s${i}`, ask] : [undefined, undefined])),
        )
        // Nothing is held for the refused ones.
        const sum = (xs: bigint[]) => xs.reduce((a, b) => a + b, 0n)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(sum(asks) + sum(asks.slice(0, 4)))
      })

      it('concurrent reserves never hold more than the credits, nor pass the limit', async () => {
        const { store, id } = await withAccount(usd(10))
        const r = uid('rpm')
        const results = await Promise.all(
          Array.from({ length: 30 }, (_, i) =>
            store.admission.reserve(
              [{ key: r, amount: 1, limit: 25 }],
              MINUTE,
              id,
              `c${i}`,
              usd('0.5'),
              0,
              TTL,
            ),
          ),
        )
        expect(results.filter((x) => x.allowed)).toHaveLength(25)
        expect(results.filter((x) => x.reservation !== null)).toHaveLength(20)
        expect((await store.ledger.credits(id, 0)).reserved).toBe(usd(10))
      })
    })

    describe('files', () => {
      const quota: FileQuota = { maxFiles: 3, maxBytes: 1000 }
      const TTL = MINUTE

      const add = async (store: Store, file: StoredFile, q: FileQuota = quota): Promise<StoredFile> => {
        const r = await store.files.reserve(file.accountId, q, 0, TTL)
        if (!r.ok) throw new Error(`reserve failed: ${r.reason}`)
        expect(await store.files.commit(r.token, file, q, 0)).toBe(true)
        return file
      }

      it('a write that breaks a uniqueness rule is a bug (500), never store_unavailable (503), and fails alone', async () => {
        const store = await open()
        const first = await add(store, fileFixture(uid('dup')))
        const r = await store.files.reserve(first.accountId, quota, 0, TTL)
        if (!r.ok) throw new Error(`reserve failed: ${r.reason}`)
        const twin = { ...fileFixture(first.accountId), id: first.id }
        // Another call in flight at the same time (one group commit on SQLite) is not failed with it.
        const [commit, other] = await Promise.allSettled([
          store.files.commit(r.token, twin, quota, 0),
          store.files.get(first.accountId, first.id),
        ])
        expect(commit.status).toBe('rejected')
        const e = toGatewayError((commit as PromiseRejectedResult).reason)
        expect(e.status).toBe(500)
        expect(e.code).toBe('internal_error')
        expect(other).toEqual({ status: 'fulfilled', value: first })
        // Nothing of the failed commit stays: the first file is intact, and the slot can be released.
        expect(await store.files.get(first.accountId, first.id)).toEqual(first)
        expect(await store.files.usage(first.accountId)).toEqual({ files: 1, bytes: first.bytes })
        await store.files.release(r.token)
      })

      it('tells which storage keys have a record, over every account', async () => {
        const store = await open()
        const a = await add(store, fileFixture(uid('alice')))
        const b = await add(store, fileFixture(uid('bob')))
        const gone = await add(store, fileFixture(a.accountId))
        await store.files.delete(a.accountId, gone.id)
        const found = await store.files.existingKeys([
          a.storageKey,
          b.storageKey,
          gone.storageKey,
          uid('key'),
        ])
        expect([...found].sort()).toEqual([a.storageKey, b.storageKey].sort())
        expect(await store.files.existingKeys([])).toEqual(new Set())
      })

      it('gets, lists newest first, filters by purpose and deletes, per account only', async () => {
        const store = await open()
        const alice = uid('alice')
        const bob = uid('bob')
        const a1 = await add(store, fileFixture(alice))
        const a2 = await add(store, fileFixture(alice, { purpose: 'batch' }))
        const b1 = await add(store, fileFixture(bob))
        const ids = async (q: Parameters<Store['files']['list']>[1], who = alice) =>
          (await store.files.list(who, q)).files.map((f) => f.id)

        expect(await store.files.get(alice, a1.id)).toEqual(a1)
        expect(await store.files.get(bob, a1.id)).toBeNull()
        expect(await ids({ limit: 100 })).toEqual([a2.id, a1.id])
        expect(await ids({ limit: 100, order: 'asc' })).toEqual([a1.id, a2.id])
        expect(await ids({ limit: 100, purpose: 'batch' })).toEqual([a2.id])
        expect(await ids({ limit: 100 }, bob)).toEqual([b1.id])

        expect(await store.files.delete(bob, a1.id)).toBeNull()
        expect(await store.files.delete(alice, a1.id)).toEqual(a1)
        expect(await store.files.delete(alice, a1.id)).toBeNull()
        expect(await store.files.get(alice, a1.id)).toBeNull()
        expect(await store.files.usage(alice)).toEqual({ files: 1, bytes: 100 })
      })

      it('pages with limit and after', async () => {
        const store = await open()
        const carol = uid('carol')
        const roomy = { maxFiles: 100, maxBytes: 1e9 }
        const ids: string[] = []
        for (let i = 0; i < 5; i++) ids.unshift((await add(store, fileFixture(carol), roomy)).id)
        const p1 = await store.files.list(carol, { limit: 2 })
        expect(p1.files.map((f) => f.id)).toEqual(ids.slice(0, 2))
        expect(p1.hasMore).toBe(true)
        const p3 = await store.files.list(carol, { limit: 2, after: ids[3] })
        expect(p3.files.map((f) => f.id)).toEqual(ids.slice(4))
        expect(p3.hasMore).toBe(false)
        expect((await store.files.list(carol, { limit: 2, after: uid('file-unknown') })).files).toEqual([])
      })

      it('holds a slot per upload in progress, so parallel uploads cannot exceed the file count', async () => {
        const store = await open()
        const dave = uid('dave')
        await add(store, fileFixture(dave))
        const attempts = await Promise.all(
          Array.from({ length: 10 }, () => store.files.reserve(dave, quota, 0, TTL)),
        )
        expect(attempts.filter((r) => r.ok)).toHaveLength(2)
        expect(attempts.filter((r) => !r.ok).every((r) => !r.ok && r.reason === 'files')).toBe(true)
        // A released slot is free again, once; another account is unaffected.
        const first = attempts.find((r) => r.ok)
        if (!first?.ok) throw new Error('expected a reservation')
        await store.files.release(first.token)
        await store.files.release(first.token)
        expect((await store.files.reserve(dave, quota, 0, TTL)).ok).toBe(true)
        expect((await store.files.reserve(dave, quota, 0, TTL)).ok).toBe(false)
        expect((await store.files.reserve(uid('erin'), quota, 0, TTL)).ok).toBe(true)
      })

      it('checks the byte quota atomically at commit', async () => {
        const store = await open()
        const frank = uid('frank')
        const r1 = await store.files.reserve(frank, quota, 0, TTL)
        const r2 = await store.files.reserve(frank, quota, 0, TTL)
        if (!r1.ok || !r2.ok) throw new Error('reserve')
        expect(r1.bytesLeft).toBe(1000)
        // Both started with 1000 bytes left; only one 600-byte file fits.
        expect(await store.files.commit(r1.token, fileFixture(frank, { bytes: 600 }), quota, 0)).toBe(true)
        expect(await store.files.commit(r2.token, fileFixture(frank, { bytes: 600 }), quota, 0)).toBe(false)
        expect(await store.files.usage(frank)).toEqual({ files: 1, bytes: 600 })
        const r3 = await store.files.reserve(frank, quota, 0, TTL)
        expect(r3.ok && r3.bytesLeft).toBe(400)
        if (r3.ok) await store.files.release(r3.token)
        // A full account is refused before any byte is read.
        await add(store, fileFixture(frank, { bytes: 400 }))
        expect(await store.files.reserve(frank, quota, 0, TTL)).toEqual({ ok: false, reason: 'bytes' })
      })

      it('lets an upload’s reservation expire: its slot is free, its commit is refused, nothing freed twice', async () => {
        const store = await open()
        const gina = uid('gina')
        const two = { maxFiles: 2, maxBytes: 1000 }
        const r1 = await store.files.reserve(gina, two, 0, 1000)
        const r2 = await store.files.reserve(gina, two, 500, 1000)
        if (!r1.ok || !r2.ok) throw new Error('reserve')
        expect(await store.files.reserve(gina, two, 999, 1000)).toEqual({ ok: false, reason: 'files' })

        // At 1000 r1 has expired: its slot goes to r3.
        const r3 = await store.files.reserve(gina, two, 1000, 1000)
        if (!r3.ok) throw new Error('expected the expired slot to be free')
        expect(await store.files.commit(r1.token, fileFixture(gina), two, 1000)).toBe(false)
        await store.files.release(r1.token)
        // r2 and r3 still hold both slots: the expired one was not freed a second time.
        expect(await store.files.reserve(gina, two, 1000, 1000)).toEqual({ ok: false, reason: 'files' })
        expect(await store.files.usage(gina)).toEqual({ files: 0, bytes: 0 })

        expect(await store.files.commit(r2.token, fileFixture(gina), two, 1499)).toBe(true)
        expect(await store.files.commit(r3.token, fileFixture(gina), two, 1500)).toBe(true)
        expect(await store.files.usage(gina)).toEqual({ files: 2, bytes: 200 })
        expect(await store.files.commit(uid('token'), fileFixture(gina), two, 1500)).toBe(false)

        // Committed straight after expiry, with nothing else happening in between.
        const ivan = uid('ivan')
        const late = await store.files.reserve(ivan, two, 0, 1000)
        if (!late.ok) throw new Error('reserve')
        expect(await store.files.commit(late.token, fileFixture(ivan), two, 1000)).toBe(false)
        expect(await store.files.usage(ivan)).toEqual({ files: 0, bytes: 0 })
        expect((await store.files.reserve(ivan, { maxFiles: 1, maxBytes: 1000 }, 1000, 1000)).ok).toBe(true)
      })
    })

    describe('isolation of returned objects', () => {
      it('accounts and keys: changing what a read returned or what was written changes nothing stored', async () => {
        const store = await open()
        const id = uid('acct')
        const input = accountFixture(id)
        const original = structuredClone(input)
        await store.accounts.create(input, usd(1))
        input.name = 'changed'
        input.rateLimits.requestsPerMinute = 999
        input.modelDiscountsPpm['x'] = 1
        expect(await store.accounts.get(id)).toEqual(original)

        const key = keyFixture(id)
        await store.accounts.addKey(key)
        const mutate = (a: Account | null | undefined) => {
          if (!a) throw new Error('expected an account')
          a.name = 'mutated'
          a.rateLimits.tokensPerMinute = 1
          a.modelDiscountsPpm['mock/chat'] = 0
        }
        mutate(await store.accounts.get(id))
        mutate(await store.accounts.findByKeyHash(key.hash))
        mutate((await store.accounts.list()).find((a) => a.id === id))
        mutate(await store.accounts.update(id, { discountPpm: 1 }))
        expect(await store.accounts.get(id)).toEqual({ ...original, discountPpm: 1 })

        const keys = await store.accounts.listKeys(id)
        keys[0]!.accountId = 'someone-else'
        keys.pop()
        expect(await store.accounts.listKeys(id)).toEqual([key])
      })

      it('generations and reservations', async () => {
        const { store, id } = await withAccount(usd(1))
        const r = (await store.ledger.reserve(id, 'g1', usd('0.5'), 0, 1000))!
        r.amount = 1n
        r.expiresAt = 1
        expect((await store.ledger.credits(id, 500)).reserved).toBe(usd('0.5'))

        const input = generationFixture(uid('gen'), id)
        const original = structuredClone(input)
        await store.ledger.settle(r, input)
        input.usage.prompt_tokens = 0
        input.cost = 0n
        const got = await store.generations.get(original.generationId)
        expect(got).toEqual(original)
        got!.usage.prompt_tokens_details.cached_tokens = 99
        got!.model = 'mutated'
        const listed = await store.generations.listByAccount(id, { limit: 10 })
        listed.data[0]!.usage.total_tokens = 0
        listed.data.pop()
        expect(await store.generations.get(original.generationId)).toEqual(original)
        expect((await store.generations.listByAccount(id, { limit: 10 })).data).toEqual([original])
      })

      it('files', async () => {
        const store = await open()
        const hank = uid('hank')
        const quota = { maxFiles: 5, maxBytes: 1000 }
        const r = await store.files.reserve(hank, quota, 0, MINUTE)
        if (!r.ok) throw new Error('reserve')
        const input = fileFixture(hank)
        const original = { ...input }
        await store.files.commit(r.token, input, quota, 0)
        input.filename = 'changed'
        expect(await store.files.get(hank, original.id)).toEqual(original)

        const got = await store.files.get(hank, original.id)
        got!.bytes = 1
        const listed = await store.files.list(hank, { limit: 10 })
        listed.files[0]!.purpose = 'batch'
        expect(await store.files.get(hank, original.id)).toEqual(original)
        expect(await store.files.list(hank, { limit: 10, purpose: 'batch' })).toEqual({
          files: [],
          hasMore: false,
        })
        expect(await store.files.usage(hank)).toEqual({ files: 1, bytes: 100 })
      })
    })

    describe('responses', () => {
      const stored = (id: string, accountId: string, createdAt = 1_000) => ({
        id,
        accountId,
        createdAt,
        input: [{ role: 'user', content: 'hi \u0000 there' }],
        response: {
          id,
          object: 'response',
          output: [{ type: 'message', content: [{ type: 'output_text', text: 'é 🦊' }] }],
        },
      })

      it('keeps a response per account: read back whole, another account sees none', async () => {
        const store = await open()
        const [a, b, id] = [uid('acct'), uid('acct'), uid('resp')]
        await store.responses.put(stored(id, a))
        expect(await store.responses.get(a, id)).toEqual(stored(id, a))
        expect(await store.responses.get(b, id)).toBeNull()
        expect(await store.responses.get(a, uid('resp'))).toBeNull()
      })

      it('deletes only the account’s own, once', async () => {
        const store = await open()
        const [a, b, id] = [uid('acct'), uid('acct'), uid('resp')]
        await store.responses.put(stored(id, a))
        expect(await store.responses.delete(b, id)).toBe(false)
        expect(await store.responses.delete(a, id)).toBe(true)
        expect(await store.responses.delete(a, id)).toBe(false)
        expect(await store.responses.get(a, id)).toBeNull()
      })

      it('deletes the ones created before a cutoff (retention)', async () => {
        const store = await open()
        const [a, old, young] = [uid('acct'), uid('resp'), uid('resp')]
        await store.responses.put(stored(old, a, 1_000))
        await store.responses.put(stored(young, a, 5_000))
        await store.responses.deleteBefore(2_000)
        expect(await store.responses.get(a, old)).toBeNull()
        expect(await store.responses.get(a, young)).not.toBeNull()
      })
    })
  })
}

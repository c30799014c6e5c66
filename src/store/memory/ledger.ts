import { capCharge, chargeCeiling } from '../../billing/overage.ts'
import { chargeCounters, keyRoom, noCounters, usageAt } from '../key-usage.ts'
import type { LedgerStore, ReservationRef, SettleLimit } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import {
  copyRecord,
  creditsOf,
  keyHeld,
  mustGet,
  openReserved,
  type AccountState,
  type LedgerState,
} from './state.ts'

// The ledger over the accounts' state (state.ts); settle also stores the generation record, which
// generations.ts reads, and charges the key's counters, which keys' usage reads.

export function createMemoryLedgerStore(state: LedgerState, maxPerAccount: number): LedgerStore {
  const { states, counters } = state
  return {
    async credits(accountId, now) {
      const s = states.get(accountId)
      return s ? creditsOf(s, now) : { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
    },
    async addCredits(accountId, amount, now) {
      const s = mustGet(state, accountId)
      s.credits += amount
      return creditsOf(s, now)
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      const s = states.get(accountId)
      if (!s) return null
      const available = s.credits - s.usage - openReserved(s, now)
      if (available <= 0n) return null
      const amount = upperBound < available ? upperBound : available
      const expiresAt = now + ttlMs
      s.reservations.set(id, { amount, expiresAt })
      return { id, accountId, amount, expiresAt }
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      const s = states.get(accountId)
      if (!s) return { reservation: null, keyLimited: false }
      const available = s.credits - s.usage - openReserved(s, now)
      if (available <= 0n) return { reservation: null, keyLimited: false }
      const room = keyRoom(counters.get(key.hash), key, keyHeld(s, key.hash, now), now)
      if (room !== null && room <= 0n) return { reservation: null, keyLimited: true }
      let amount = upperBound < available ? upperBound : available
      if (room !== null && room < amount) amount = room
      const expiresAt = now + ttlMs
      s.reservations.set(id, { amount, expiresAt, keyHash: key.hash })
      return { reservation: { id, accountId, amount, expiresAt }, keyLimited: false }
    },
    async keyUsage(accountId, keyHashes, now) {
      const s = states.get(accountId)
      return keyHashes.map((h) => usageAt(counters.get(h), s ? keyHeld(s, h, now) : 0n, now))
    },
    async renew(ref, now, ttlMs) {
      const r = states.get(ref.accountId)?.reservations.get(ref.id)
      if (!r || r.expiresAt <= now) return false
      r.expiresAt = now + ttlMs
      return true
    },
    async settle(ref, input, limit) {
      return settle(state, maxPerAccount, ref, input, limit)
    },
    async release(ref) {
      states.get(ref.accountId)?.reservations.delete(ref.id)
    },
  }
}

/** LedgerStore.settle: charges once per generation id, for as long as the account exists. */
function settle(
  state: LedgerState,
  maxPerAccount: number,
  ref: ReservationRef,
  input: GenerationRecord,
  limit: SettleLimit | undefined,
): GenerationRecord | null {
  if (input.accountId !== ref.accountId) {
    throw new Error(`generation ${input.generationId} settled against another account's reservation`)
  }
  const s = mustGet(state, ref.accountId)
  if (state.settled.has(input.generationId)) return null
  const now = limit?.now ?? input.createdAt + input.generationTimeMs
  const stored = s.reservations.get(ref.id)
  s.reservations.delete(ref.id)
  const open = stored && stored.expiresAt > now ? stored : undefined
  const held = limit?.held ?? open?.amount
  const keyHash = input.keyHash ?? stored?.keyHash
  const charged =
    open && held !== undefined && input.cost <= held
      ? input
      : capCharge(
          input,
          chargeCeiling({
            held,
            overdraft: s.account.overdraft ?? 0n,
            free: s.credits - s.usage - openReserved(s, now),
          }),
        )
  const record = keyHash === undefined || charged.keyHash === keyHash ? charged : { ...charged, keyHash }
  s.usage += record.cost
  if (keyHash !== undefined) {
    state.counters.set(
      keyHash,
      chargeCounters(state.counters.get(keyHash) ?? noCounters(), record.createdAt, record.cost),
    )
  }
  state.records.set(record.generationId, copyRecord(record))
  state.settled.add(record.generationId)
  keepRecord(state, s, record.generationId, maxPerAccount)
  return copyRecord(record)
}

/** Adds the id to the account's records, dropping the oldest beyond `maxPerAccount`. */
function keepRecord(state: LedgerState, s: AccountState, generationId: string, maxPerAccount: number): void {
  s.generations.push(generationId)
  // Dropped in batches (a fiftieth of the cap): shifting one id off a 50 000-long array on every
  // request is a copy of it.
  const dropBatch = Math.max(1, Math.floor(maxPerAccount / 50))
  if (s.generations.length - maxPerAccount >= dropBatch) {
    for (const id of s.generations.splice(0, s.generations.length - maxPerAccount)) state.records.delete(id)
  }
}

import { capCharge, chargeCeiling } from '../../billing/overage.ts'
import { chargeCounters, keyRoom, noCounters, usageAt } from '../key-usage.ts'
import type { Credits, KeyHold, LedgerStore, Reservation, ReservationRef, SettleLimit } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import type { SqliteHelpers } from './commit.ts'
import { encodeRecord } from './generations.ts'
import { countersOf, keyHeldOf, writeCounters } from './keys.ts'

// Credits, holds and charges. Settle also stores the generation record (generations.ts reads it) and
// the key's counters (keys.ts), in the same transaction as the charge. Money is TEXT decimal
// picodollars (migrations.ts), added up here as bigint within the transaction.

// The open holds of an account, summed by SQLite: one row back however many requests are in flight
// (a thousand held streams made every new request read a thousand rows). SQLite's sum() of 64-bit
// integers is exact or fails with "integer overflow"; amounts wider than 18 digits (which CAST would
// clamp) or a sum past 64 bits are summed here instead, exactly, from the rows.
function reservedOf({ get, all }: SqliteHelpers, accountId: string, now: number): bigint {
  const open = 'FROM reservations WHERE account_id = ? AND expires_at > ?'
  try {
    const r = get<{ widest: number | null; total: string | null }>(
      `SELECT max(length(amount)) AS widest,
         CAST(sum(CASE WHEN length(amount) <= 18 THEN CAST(amount AS INTEGER) END) AS TEXT) AS total ${open}`,
      accountId,
      now,
    )
    if (r?.widest === null || r?.widest === undefined) return 0n
    if (r.widest <= 18 && r.total !== null) return BigInt(r.total)
  } catch (err) {
    if (!/integer overflow/.test((err as Error).message)) throw err
  }
  let sum = 0n
  for (const r of all<{ amount: string }>(`SELECT amount ${open}`, accountId, now)) sum += BigInt(r.amount)
  return sum
}

const balanceOf = ({ get }: SqliteHelpers, accountId: string) =>
  get<{ credits: string; usage: string }>('SELECT credits, usage FROM accounts WHERE id = ?', accountId)

/** LedgerStore.credits, inside a transaction. */
export function creditsOf(h: SqliteHelpers, accountId: string, now: number): Credits {
  const b = balanceOf(h, accountId)
  if (!b) return { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
  return {
    totalCredits: BigInt(b.credits),
    totalUsage: BigInt(b.usage),
    reserved: reservedOf(h, accountId, now),
  }
}

/** LedgerStore.reserve (reserveForKey with `key`), inside a transaction. */
export function reserveNow(
  h: SqliteHelpers,
  accountId: string,
  id: string,
  upperBound: bigint,
  now: number,
  ttlMs: number,
  key?: KeyHold,
): { reservation: Reservation | null; keyLimited: boolean } {
  const b = balanceOf(h, accountId)
  if (!b) return { reservation: null, keyLimited: false }
  // Expired holds (their request crashed or hung) stop counting; drop them while here.
  h.run('DELETE FROM reservations WHERE account_id = ? AND expires_at <= ?', accountId, now)
  const available = BigInt(b.credits) - BigInt(b.usage) - reservedOf(h, accountId, now)
  if (available <= 0n) return { reservation: null, keyLimited: false }
  let amount = upperBound < available ? upperBound : available
  // The key's limit, in the same transaction: its spend counters and its own open holds.
  if (key && key.limit !== null) {
    const room = keyRoom(countersOf(h, key.hash), key, keyHeldOf(h, accountId, key.hash, now), now)!
    if (room <= 0n) return { reservation: null, keyLimited: true }
    if (room < amount) amount = room
  }
  const expiresAt = now + ttlMs
  h.run(
    `INSERT INTO reservations (account_id, id, amount, expires_at, key_hash) VALUES (?, ?, ?, ?, ?)
     ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount, expires_at = excluded.expires_at,
       key_hash = excluded.key_hash`,
    accountId,
    id,
    amount.toString(),
    expiresAt,
    key?.hash ?? null,
  )
  return { reservation: { id, accountId, amount, expiresAt }, keyLimited: false }
}

export function createSqliteLedgerStore(h: SqliteHelpers): LedgerStore {
  const { run, tx, txRead } = h
  return {
    async credits(accountId, now) {
      // Two statements, one snapshot: read within the group commit (admission asks this of every
      // request before its body).
      return txRead(() => creditsOf(h, accountId, now))
    },
    async addCredits(accountId, amount, now) {
      return tx(() => {
        const b = balanceOf(h, accountId)
        if (!b) throw new Error(`unknown account ${accountId}`)
        run(
          'UPDATE accounts SET credits = ? WHERE id = ?',
          (BigInt(b.credits) + amount).toString(),
          accountId,
        )
        return creditsOf(h, accountId, now)
      })
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      return tx(() => reserveNow(h, accountId, id, upperBound, now, ttlMs).reservation)
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      return tx(() => reserveNow(h, accountId, id, upperBound, now, ttlMs, key))
    },
    async keyUsage(accountId, keyHashes, now) {
      return txRead(() =>
        keyHashes.map((k) => usageAt(countersOf(h, k), keyHeldOf(h, accountId, k, now), now)),
      )
    },
    async renew(ref, now, ttlMs) {
      return tx(
        () =>
          run(
            'UPDATE reservations SET expires_at = ? WHERE account_id = ? AND id = ? AND expires_at > ?',
            now + ttlMs,
            ref.accountId,
            ref.id,
            now,
          ) > 0,
      )
    },
    async settle(ref, input, limit) {
      if (input.accountId !== ref.accountId) {
        throw new Error(`generation ${input.generationId} settled against another account's reservation`)
      }
      return tx(() => settleNow(h, ref, input, limit))
    },
    async release(ref) {
      await tx(() => run('DELETE FROM reservations WHERE account_id = ? AND id = ?', ref.accountId, ref.id))
    },
  }
}

/** LedgerStore.settle, inside a transaction. */
function settleNow(
  h: SqliteHelpers,
  ref: ReservationRef,
  input: GenerationRecord,
  limit: SettleLimit | undefined,
): GenerationRecord | null {
  const { get, run } = h
  const b = get<{ credits: string; usage: string; overdraft: string }>(
    'SELECT credits, usage, overdraft FROM accounts WHERE id = ?',
    ref.accountId,
  )
  if (!b) throw new Error(`unknown account ${ref.accountId}`)
  const now = limit?.now ?? input.createdAt + input.generationTimeMs
  const hold = get<{ amount: string }>(
    'SELECT amount FROM reservations WHERE account_id = ? AND id = ? AND expires_at > ?',
    ref.accountId,
    ref.id,
    now,
  )
  const held = limit?.held ?? (hold ? BigInt(hold.amount) : undefined)
  const keyHash =
    input.keyHash ??
    get<{ key_hash: string | null }>(
      'SELECT key_hash FROM reservations WHERE account_id = ? AND id = ?',
      ref.accountId,
      ref.id,
    )?.key_hash ??
    undefined
  const charged =
    hold && held !== undefined && input.cost <= held
      ? input
      : capCharge(
          input,
          chargeCeiling({
            held,
            overdraft: BigInt(b.overdraft),
            // The other open holds: this one is still in the sum.
            free:
              BigInt(b.credits) -
              BigInt(b.usage) -
              (reservedOf(h, ref.accountId, now) - (hold ? BigInt(hold.amount) : 0n)),
          }),
        )
  const record = keyHash === undefined || charged.keyHash === keyHash ? charged : { ...charged, keyHash }
  // The UNIQUE generation id makes the charge happen once: a repeat inserts nothing.
  const inserted = run(
    `INSERT INTO generations (generation_id, account_id, created_at, cost, record, key_hash) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT (generation_id) DO NOTHING`,
    record.generationId,
    record.accountId,
    record.createdAt,
    record.cost.toString(),
    encodeRecord(record),
    keyHash ?? null,
  )
  if (inserted === 0) return null
  if (keyHash !== undefined) {
    writeCounters(
      h,
      keyHash,
      chargeCounters(countersOf(h, keyHash) ?? noCounters(), record.createdAt, record.cost),
    )
  }
  run('DELETE FROM reservations WHERE account_id = ? AND id = ?', ref.accountId, ref.id)
  run('UPDATE accounts SET usage = ? WHERE id = ?', (BigInt(b.usage) + record.cost).toString(), ref.accountId)
  return record
}

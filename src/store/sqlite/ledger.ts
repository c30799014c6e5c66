import { capCharge, chargeCeiling } from '../../billing/overage.ts'
import { chargeCounters, keyRoom, noCounters, usageAt } from '../key-usage.ts'
import type { Credits, KeyHold, LedgerStore, Reservation, ReservationRef, SettleLimit } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import type { SqliteHelpers } from './commit.ts'
import { decodeRecord, encodeRecord, type EncodedRecord } from './generations.ts'
import { countersOf, keyHeldOf, sumAmounts, writeCounters } from './keys.ts'

// Credits, holds and charges. Settle also stores the generation record (generations.ts reads it) and
// the key's counters (keys.ts), in the same transaction as the charge. Money is TEXT decimal
// picodollars (migrations.ts), added up here as bigint within the transaction.

// What an account holds. Its row keeps `held`, the sum of all its holds, open or expired, kept by
// triggers on reservations (migration 10): a new hold reads one row however many requests are in
// flight (summing the open holds made a hold cost 26 µs with none open, 199 µs with a thousand, 1.1 ms
// with six thousand, `node bench/open-holds.ts`). The holds that expired and were not swept yet are
// subtracted, read through the expiry index (the sweep and every new hold drop them, so they are
// few), never through the account's open ones. NULL until a hold sums them (after the migration, or
// once the total outgrew what the triggers add up exactly).

/** An account's row as the ledger reads it. */
interface Balance {
  credits: string
  usage: string
  overdraft: string
  held: string | null
}

const balanceOf = ({ get }: SqliteHelpers, accountId: string) =>
  get<Balance>('SELECT credits, usage, overdraft, held FROM accounts WHERE id = ?', accountId)

/**
 * Every hold of the account, open or expired, summed by SQLite: one row back. SQLite's sum() of
 * 64-bit integers is exact or fails with "integer overflow"; amounts wider than 18 digits (which
 * CAST would clamp) or a sum past 64 bits are summed here instead, exactly, from the rows.
 */
function allHeldOf({ get, all }: SqliteHelpers, accountId: string): bigint {
  const holds = 'FROM reservations WHERE account_id = ?'
  try {
    const r = get<{ widest: number | null; total: string | null }>(
      `SELECT max(length(amount)) AS widest,
         CAST(sum(CASE WHEN length(amount) <= 18 THEN CAST(amount AS INTEGER) END) AS TEXT) AS total ${holds}`,
      accountId,
    )
    if (r?.widest === null || r?.widest === undefined) return 0n
    if (r.widest <= 18 && r.total !== null) return BigInt(r.total)
  } catch (err) {
    if (!/integer overflow/.test((err as Error).message)) throw err
  }
  return sumAmounts(all<{ amount: string }>(`SELECT amount ${holds}`, accountId))
}

/** The sum of the account's holds, open or expired: its row's, or summed while the row keeps none. */
const heldOf = (h: SqliteHelpers, accountId: string, b: Balance): bigint =>
  b.held === null ? allHeldOf(h, accountId) : BigInt(b.held)

/** The account's holds expired by `now` and not swept yet. */
const expiredOf = ({ all }: SqliteHelpers, accountId: string, now: number): bigint =>
  sumAmounts(
    all<{ amount: string }>(
      'SELECT amount FROM reservations INDEXED BY reservations_by_expiry WHERE expires_at <= ? AND account_id = ?',
      now,
      accountId,
    ),
  )

/** The account's open holds (unexpired at `now`). */
const reservedOf = (h: SqliteHelpers, accountId: string, now: number, b: Balance): bigint =>
  heldOf(h, accountId, b) - expiredOf(h, accountId, now)

/** LedgerStore.credits, inside a transaction. */
export function creditsOf(h: SqliteHelpers, accountId: string, now: number): Credits {
  const b = balanceOf(h, accountId)
  if (!b) return { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
  return {
    totalCredits: BigInt(b.credits),
    totalUsage: BigInt(b.usage),
    reserved: reservedOf(h, accountId, now, b),
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
  // Expired holds (their request crashed or hung) stop counting; drop them while here. Every hold
  // left is open, so the account's held total is what it holds now.
  const expired = sumAmounts(
    h.all<{ amount: string }>(
      `DELETE FROM reservations INDEXED BY reservations_by_expiry WHERE expires_at <= ? AND account_id = ?
       RETURNING amount`,
      now,
      accountId,
    ),
  )
  // The triggers took the expired holds off the kept total; a total not kept is summed and kept.
  let held: bigint
  if (b.held !== null) held = BigInt(b.held) - expired
  else {
    held = allHeldOf(h, accountId)
    h.run('UPDATE accounts SET held = ? WHERE id = ?', held.toString(), accountId)
  }
  const available = BigInt(b.credits) - BigInt(b.usage) - held
  if (available <= 0n) return { reservation: null, keyLimited: false }
  let amount = upperBound < available ? upperBound : available
  // The key's limit, in the same transaction: its spend counters and its own open holds.
  if (key && key.limit !== null) {
    const room = keyRoom(countersOf(h, key.hash), key, keyHeldOf(h, key.hash, now), now)!
    if (room <= 0n) return { reservation: null, keyLimited: true }
    if (room < amount) amount = room
  }
  const expiresAt = now + ttlMs
  // A hold taken again under its id replaces the one before (counted in `available` above).
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

/** The SQLite ledger: LedgerStore, and the settlement of a record sent encoded (the database thread's). */
export interface SqliteLedgerStore extends LedgerStore {
  /**
   * LedgerStore.settle of an EncodedRecord: answers that same object when it was charged as given (its
   * text stored as it is), the record as charged when it was not (capped), null for a repeat.
   */
  settleEncoded(
    ref: ReservationRef,
    input: EncodedRecord,
    limit?: SettleLimit,
  ): Promise<EncodedRecord | GenerationRecord | null>
}

export function createSqliteLedgerStore(h: SqliteHelpers): SqliteLedgerStore {
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
    // A key's holds are counted whatever account they are under (keyHeldOf): the account is not read.
    async keyUsage(_accountId, keyHashes, now) {
      return txRead(() => keyHashes.map((k) => usageAt(countersOf(h, k), keyHeldOf(h, k, now), now)))
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
      sameAccount(ref, input)
      return tx(() => settleNow(h, ref, input, limit) as GenerationRecord | null)
    },
    async settleEncoded(ref, input, limit) {
      sameAccount(ref, input)
      return tx(() => settleNow(h, ref, input, limit))
    },
    async release(ref) {
      await tx(() => run('DELETE FROM reservations WHERE account_id = ? AND id = ?', ref.accountId, ref.id))
    },
  }
}

function sameAccount(ref: ReservationRef, input: GenerationRecord | EncodedRecord): void {
  if (input.accountId !== ref.accountId) {
    throw new Error(`generation ${input.generationId} settled against another account's reservation`)
  }
}

/**
 * LedgerStore.settle, inside a transaction. An EncodedRecord charged as given is stored as its text and
 * answered as it came; the record is decoded only when the charge changes it (past its hold).
 */
function settleNow(
  h: SqliteHelpers,
  ref: ReservationRef,
  input: GenerationRecord | EncodedRecord,
  limit: SettleLimit | undefined,
): GenerationRecord | EncodedRecord | null {
  const { get, run } = h
  const whole = (): GenerationRecord => ('json' in input ? decodeRecord(input.json) : input)
  const b = balanceOf(h, ref.accountId)
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
          whole(),
          chargeCeiling({
            held,
            overdraft: BigInt(b.overdraft),
            // The other open holds: this one is still in the sum.
            free:
              BigInt(b.credits) -
              BigInt(b.usage) -
              (reservedOf(h, ref.accountId, now, b) - (hold ? BigInt(hold.amount) : 0n)),
          }),
        )
  const record =
    keyHash === undefined || charged.keyHash === keyHash
      ? charged
      : { ...(charged === input ? whole() : (charged as GenerationRecord)), keyHash }
  // The UNIQUE generation id makes the charge happen once: a repeat inserts nothing.
  const inserted = run(
    `INSERT INTO generations (generation_id, account_id, created_at, cost, record, key_hash) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT (generation_id) DO NOTHING`,
    record.generationId,
    record.accountId,
    record.createdAt,
    record.cost.toString(),
    'json' in record ? record.json : encodeRecord(record),
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

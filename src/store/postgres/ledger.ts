import { capCharge } from '../../billing/overage.ts'
import type { Money } from '../../domain/money.ts'
import { usageAt, windowStart, windowStarts } from '../key-usage.ts'
import type { Credits, KeyHold, LedgerStore, Reservation, ReservationRef, SettleLimit } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import { batched, type Batch } from './batch.ts'
import { KEY_CACHE } from './key-cache.ts'
import { DatabaseError, isUnknownAccount, money, toMoney, type Query } from './pool.ts'

// Balances, holds and settles. A settle writes its generation record in the same statement as the
// charge (junction_settle_durably), so that statement is here; generations.ts only reads the records.
// The credits-known memory and the key-hold parameters are shared with admission.ts.

interface CreditsRow {
  credits: string
  usage: string
  reserved: string
}

// The open holds from the ledger row's total of holds (kept by triggers, migration 13).
const OPEN_RESERVED = 'junction_open_held(ledger.account_id, ledger.held, $2) AS reserved'

const toCredits = (r: CreditsRow): Credits => ({
  totalCredits: toMoney(r.credits),
  totalUsage: toMoney(r.usage),
  reserved: toMoney(r.reserved),
})

export interface SettleItem {
  ref: ReservationRef
  record: GenerationRecord
  limit: SettleLimit | undefined
}

interface ReserveItem {
  accountId: string
  id: string
  upperBound: Money
  now: number
  ttlMs: number
}

/** SQLSTATE deadlock_detected: the database rolled the statement back whole. */
const DEADLOCK = '40P01'

const settleNow = ({ record: r, limit }: SettleItem): number => limit?.now ?? r.createdAt + r.generationTimeMs

/** One settle as junction_settle_many (migration 10) reads it (exported for bench/postgres-floor.ts). */
export const settleJson = (s: SettleItem) => {
  const r = s.record
  return {
    id: r.generationId,
    a: r.accountId,
    api: r.api,
    model: r.model,
    provider: r.provider,
    createdAt: r.createdAt,
    generationTimeMs: r.generationTimeMs,
    latencyMs: r.latencyMs,
    streamed: r.streamed,
    finishReason: r.finishReason,
    cancelled: r.cancelled,
    costSource: r.costSource,
    usage: r.usage,
    upstreamCost: money(r.upstreamCost),
    discountPpm: r.discountPpm,
    discount: money(r.discount),
    cost: money(r.cost),
    attempts: r.attempts ?? null,
    ref: s.ref.id,
    held: s.limit?.held === undefined ? null : money(s.limit.held),
    now: settleNow(s),
    tokens: r.usage.total_tokens,
    // For junction_key_charge (migration 11): the key (NULL: its hold's, if any) and the windows.
    key: r.keyHash ?? null,
    ...keyWindows(r.createdAt),
  }
}

const keyWindows = (t: number) => {
  const w = windowStarts(t)
  return { kd: w.day, kw: w.week, km: w.month }
}

/**
 * The accounts this instance saw with credits left in the last `creditsKnownMs` (a balance read said
 * so), for the check before a request's body, which is only an early refusal: the hold decides
 * exactly. Whatever this instance sees that can leave an account with nothing (a hold short of what
 * was asked or refused, a charge not within its hold, credits changed) forgets it at once; what
 * other instances spend is seen when the time is up.
 */
export interface CreditsKnown {
  has(accountId: string): boolean
  saw(accountId: string, has: boolean): void
  forget(accountId: string): void
}

export function createCreditsKnown(forMs: number): CreditsKnown {
  const seen = new Map<string, number>()
  return {
    has: (accountId) => {
      const at = seen.get(accountId)
      return at !== undefined && performance.now() - at < forMs
    },
    saw: (accountId, has) => {
      if (!has) return void seen.delete(accountId)
      if (seen.size >= KEY_CACHE) seen.clear()
      seen.set(accountId, performance.now())
    },
    forget: (accountId) => void seen.delete(accountId),
  }
}

/** A key's hold parameters as junction_reserve_key and the admissions take them (migrations 11, 13). */
export const keyHoldParams = (key: KeyHold | undefined, now: number) => [
  key?.hash ?? null,
  key?.limit == null ? null : money(key.limit),
  key?.limitReset ?? null,
  key?.limitReset == null ? null : windowStart(key.limitReset, now),
]

/** A hold's amount as those functions return it: NULL refused for credits, -1 for the key's limit. */
export const toKeyHeld = (
  amount: string | null | undefined,
  r: { id: string; accountId: string; expiresAt: number },
): { reservation: Reservation | null; keyLimited: boolean } => {
  if (amount == null) return { reservation: null, keyLimited: false }
  if (amount === '-1') return { reservation: null, keyLimited: true }
  return { reservation: { ...r, amount: toMoney(amount) }, keyLimited: false }
}

/** Balance reads: one statement for a batch (credits_many). */
function batchedCredits(query: Query, batch: Batch) {
  return batched<{ accountId: string; now: number }, Credits>(
    batch,
    async ({ accountId, now }) => {
      const { rows } = await query<CreditsRow>(
        `SELECT credits, usage, ${OPEN_RESERVED} FROM ledger WHERE account_id = $1`,
        [accountId, now],
        'credits',
      )
      return rows[0] ? toCredits(rows[0]) : { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
    },
    async (items) => {
      const { rows } = await query<{
        i: string
        credits: string | null
        usage: string | null
        reserved: string
      }>(
        `SELECT q.i, l.credits, l.usage, junction_open_held(q.a, l.held, q.t) AS reserved
         FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(a, t, i)
         LEFT JOIN ledger l ON l.account_id = q.a`,
        [items.map((c) => c.accountId), items.map((c) => c.now)],
        'credits_many',
      )
      const out: Credits[] = items.map(() => ({ totalCredits: 0n, totalUsage: 0n, reserved: 0n }))
      for (const r of rows) {
        if (r.credits !== null && r.usage !== null) out[Number(r.i) - 1] = toCredits(r as CreditsRow)
      }
      return out
    },
  )
}

/** Holds on the credits alone: one statement for a batch (reserve_many). */
function batchedReserve(query: Query, batch: Batch) {
  return batched<ReserveItem, Reservation | null>(
    batch,
    async ({ accountId, id, upperBound, now, ttlMs }) => {
      const expiresAt = now + ttlMs
      // One round trip: junction_reserve (migration 2) locks the account's ledger row, so every
      // reserve of the account, from any process, runs one at a time and sees the holds before it.
      const { rows } = await query<{ amount: string | null }>(
        'SELECT junction_reserve($1, $2, $3, $4, $5) AS amount',
        [accountId, id, money(upperBound), expiresAt, now],
        'reserve',
      )
      const amount = rows[0]?.amount
      return amount == null ? null : { id, accountId, amount: toMoney(amount), expiresAt }
    },
    async (items) => {
      // One round trip and one commit for the batch: junction_reserve_many (migration 10) locks the
      // batch's ledger rows in account order, then reserves in the order of the calls.
      const { rows } = await query<{ amounts: (string | null)[] }>(
        // text[]: pg would read numeric[] as floats.
        'SELECT junction_reserve_many($1::text[], $2::text[], $3::numeric[], $4::bigint[], $5::bigint[])::text[] AS amounts',
        [
          items.map((r) => r.accountId),
          items.map((r) => r.id),
          items.map((r) => money(r.upperBound)),
          items.map((r) => r.now + r.ttlMs),
          items.map((r) => r.now),
        ],
        'reserve_many',
      )
      const amounts = rows[0]!.amounts
      return items.map(({ accountId, id, now, ttlMs }, i) => {
        const amount = amounts[i]
        return amount == null ? null : { id, accountId, amount: toMoney(amount), expiresAt: now + ttlMs }
      })
    },
  )
}

/** Settles, each with its record and its key's charge: one statement for a batch (settle_many). */
function batchedSettle(query: Query, batch: Batch) {
  const settleMany = async (
    items: SettleItem[],
    name = 'settle_many',
  ): Promise<(GenerationRecord | null)[]> => {
    // One round trip for the batch (junction_settle_durably, migration 13): each settle in order,
    // atomic with its record as alone, each record's key charged in the same transaction
    // (junction_key_charge, migration 11), the ledger rows freed before the disk is waited for, and
    // every one durable before any caller hears back.
    //
    // The same generation settled at once by two callers can deadlock: a settle within its hold
    // inserts its record before locking the ledger row, one past its hold locks the row first. The
    // database then rolls one back whole; it is sent again, and finds the other's record (a repeat,
    // charged nothing). Distinct generations never wait on each other's records.
    let rows: { costs: (string | null)[] }[] | undefined
    for (let attempt = 1; rows === undefined; attempt++) {
      try {
        ;({ rows } = await query<{ costs: (string | null)[] }>(
          'CALL junction_settle_durably($1::jsonb, NULL)',
          [JSON.stringify(items.map(settleJson))],
          name,
        ))
      } catch (err) {
        if (isUnknownAccount(err))
          throw new Error(`unknown account ${items[0]?.ref.accountId}`, { cause: err })
        if (!(err instanceof DatabaseError && err.code === DEADLOCK) || attempt >= 3) throw err
      }
    }
    const costs = rows[0]!.costs
    return items.map((s, i) => {
      const cost = costs[i]
      return cost == null ? null : capCharge(s.record, toMoney(cost))
    })
  }
  // A settle alone goes through the batch statement too: a record that names no key may take its
  // hold's (a prediction's), which junction_key_prepare looks up.
  return batched<SettleItem, GenerationRecord | null>(
    batch,
    async (item) => (await settleMany([item], 'settle'))[0]!,
    settleMany,
  )
}

/** A page of keys' spending, with what their open holds keep back. */
function readKeyUsage(query: Query): LedgerStore['keyUsage'] {
  return async (accountId, keyHashes, now) => {
    const { rows } = await query<{
      total: string | null
      day_start: string | null
      day: string | null
      week_start: string | null
      week: string | null
      month_start: string | null
      month: string | null
      held: string
    }>(
      // The key's holds from its key_held row (migration 17), less the expired ones not swept yet.
      `SELECT u.total, u.day_start, u.day, u.week_start, u.week, u.month_start, u.month,
           coalesce(k.held, 0) - (SELECT coalesce(sum(r.amount), 0) FROM reservations r
             WHERE r.account_id = $1 AND r.key_hash = h.k AND r.expires_at <= $3) AS held
         FROM unnest($2::text[]) WITH ORDINALITY AS h(k, i)
         LEFT JOIN key_usage u ON u.key_hash = h.k
         LEFT JOIN key_held k ON k.key_hash = h.k ORDER BY h.i`,
      [accountId, keyHashes, now],
    )
    return rows.map((r) =>
      usageAt(
        r.total === null
          ? undefined
          : {
              total: toMoney(r.total),
              dayStart: Number(r.day_start),
              day: toMoney(r.day!),
              weekStart: Number(r.week_start),
              week: toMoney(r.week!),
              monthStart: Number(r.month_start),
              month: toMoney(r.month!),
            },
        toMoney(r.held),
        now,
      ),
    )
  }
}

export function createLedger(query: Query, batch: Batch, known: CreditsKnown): LedgerStore {
  const credits = batchedCredits(query, batch)
  const reserve = batchedReserve(query, batch)
  const settle = batchedSettle(query, batch)
  return {
    credits: (accountId, now) => credits({ accountId, now }),
    async addCredits(accountId, amount, now) {
      known.forget(accountId)
      const { rows } = await query<CreditsRow>(
        `UPDATE ledger SET credits = credits + $3 WHERE account_id = $1 RETURNING credits, usage, ${OPEN_RESERVED}`,
        [accountId, now, money(amount)],
      )
      if (!rows[0]) throw new Error(`unknown account ${accountId}`)
      return toCredits(rows[0])
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      const expiresAt = now + ttlMs
      // One round trip: junction_reserve_key (migration 11, open holds from the ledger row since
      // migration 13) is junction_reserve plus the key's limit, under the same lock of the account's
      // ledger row.
      const { rows } = await query<{ amount: string | null }>(
        'SELECT junction_reserve_key($1, $2, $3, $4, $5, $6, $7, $8, $9)::text AS amount',
        [accountId, id, money(upperBound), expiresAt, now, ...keyHoldParams(key, now)],
        'reserve_key',
      )
      const held = toKeyHeld(rows[0]?.amount, { id, accountId, expiresAt })
      if (held.reservation === null || held.reservation.amount < upperBound) known.forget(accountId)
      return held
    },
    keyUsage: readKeyUsage(query),
    async reserve(accountId, id, upperBound, now, ttlMs) {
      const r = await reserve({ accountId, id, upperBound, now, ttlMs })
      if (r === null || r.amount < upperBound) known.forget(accountId)
      return r
    },
    async renew(ref, now, ttlMs) {
      const { rowCount } = await query(
        'UPDATE reservations SET expires_at = $3 WHERE account_id = $1 AND id = $2 AND expires_at > $4',
        [ref.accountId, ref.id, now + ttlMs, now],
        'renew',
      )
      return (rowCount ?? 0) > 0
    },
    async settle(ref, record, limit) {
      if (record.accountId !== ref.accountId) {
        throw new Error(`generation ${record.generationId} settled against another account's reservation`)
      }
      // A charge within its hold leaves more free than before; any other may leave nothing.
      if (limit?.held === undefined || record.cost > limit.held) known.forget(record.accountId)
      return settle({ ref, record, limit })
    },
    async release(ref) {
      // The ledger row first (the trigger that updates its total of holds would lock it after the
      // hold's row, the reverse of what a settle does).
      await query(
        `WITH l AS (SELECT 1 FROM ledger WHERE account_id = $1 FOR NO KEY UPDATE)
         DELETE FROM reservations WHERE account_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM l)`,
        [ref.accountId, ref.id],
        'release',
      )
    },
  }
}

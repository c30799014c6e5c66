import type { GenerationRecord } from '../domain/records.ts'
import type { Money } from '../domain/money.ts'

// A request is charged at most what admission held for it, plus the account's overdraft, and never so
// much that the account's balance (less the other requests' open holds) goes below −overdraft. What
// the upstream's usage prices beyond that is not charged: it is the record's `unbilledOverage`, for the
// operator to see and alert on. Pure functions; each store calls them inside the step that charges, so
// the balance they read is the one the charge lands on (store/postgres/ledger.ts repeats them in SQL). A charge
// within its hold, while the hold is still open, is the common case and needs neither: the hold was
// taken from the balance, so the stores charge it as it is without reading the other holds.

export interface ChargeLimit {
  /** What admission held for the request; undefined when unknown (no per-request cap then). */
  held: Money | undefined
  /** The account's overdraft (≥ 0). */
  overdraft: Money
  /** credits − usage − the other open holds of the account, before this charge. */
  free: Money
}

/** The most the request may be charged. */
export function chargeCeiling(l: ChargeLimit): Money {
  const overdraft = l.overdraft > 0n ? l.overdraft : 0n
  let ceiling = l.free + overdraft
  if (l.held !== undefined && l.held + overdraft < ceiling) ceiling = l.held + overdraft
  return ceiling > 0n ? ceiling : 0n
}

/**
 * The record as charged: `cost` at most `ceiling`, the rest in `unbilledOverage` (USD, and the share
 * of the record's tokens it stands for, rounded half up). A record within the ceiling is unchanged.
 */
export function capCharge(record: GenerationRecord, ceiling: Money): GenerationRecord {
  if (record.cost <= ceiling) return record
  const charged = ceiling > 0n ? ceiling : 0n
  const unbilled = record.cost - charged
  const tokens = BigInt(record.usage.total_tokens)
  return {
    ...record,
    cost: charged,
    unbilledOverage: {
      usd: unbilled,
      tokens: Number((tokens * unbilled * 2n + record.cost) / (2n * record.cost)),
    },
  }
}

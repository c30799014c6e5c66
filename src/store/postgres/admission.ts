import type { Money } from '../../domain/money.ts'
import type { AdmissionStore, AdmitOutcome, BeforeBodyOutcome, KeyHold } from '../types.ts'
import { batched, type Batch } from './batch.ts'
import { keyHoldParams, toKeyHeld, type CreditsKnown } from './ledger.ts'
import { money, type Query } from './pool.ts'
import { flattenChecks, toDecisions, type ConsumeItem, type ConsumeRow } from './rate-limits.ts'

interface BeforeBodyItem extends ConsumeItem {
  accountId: string
  credits: boolean
}

interface AdmitItem extends ConsumeItem {
  accountId: string
  id: string
  upperBound: Money
  ttlMs: number
  key: KeyHold | undefined
}

/**
 * AdmissionStore: each step one statement for the whole batch of calls pending at once
 * (junction_before_body_many, junction_admit_many: migration 13), the limits and the balance read, or
 * the limits and the hold, instead of two round trips in a row. The hold's commit does not wait for
 * the disk (see the migration); the settle's does.
 */
export function createAdmission(query: Query, batch: Batch, known: CreditsKnown): AdmissionStore {
  const beforeBodyMany = async (items: BeforeBodyItem[]): Promise<BeforeBodyOutcome[]> => {
    const { rows } = await query<ConsumeRow & { call: number; has: boolean | null }>(
      `SELECT call, fits, used, has FROM junction_before_body_many($1::integer[], $2::integer[],
         $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[])`,
      [...flattenChecks(items), items.map((item) => (item.credits ? item.accountId : null))],
      'before_body_many',
    )
    const checks: ConsumeRow[][] = items.map(() => [])
    const has: (boolean | null)[] = items.map(() => null)
    for (const r of rows) {
      if (r.has === null) checks[r.call - 1]!.push(r)
      else has[r.call - 1] = r.has
    }
    return items.map((item, i) => {
      const decided = toDecisions(item, checks[i]!)
      const hasCredits = decided.allowed && item.credits ? has[i]! : null
      if (hasCredits !== null) known.saw(item.accountId, hasCredits)
      return { ...decided, hasCredits }
    })
  }
  // A call alone without rate checks is a plain statement: the many-call function costs more to run.
  const beforeBodyOne = async (item: BeforeBodyItem): Promise<BeforeBodyOutcome> => {
    if (item.checks.length > 0) return (await beforeBodyMany([item]))[0]!
    const { rows } = await query<{ has: boolean }>(
      'SELECT credits - usage - junction_open_held(account_id, held, $2) > 0 AS has FROM ledger WHERE account_id = $1',
      [item.accountId, item.now],
      'has_credits',
    )
    const has = rows[0]?.has === true
    known.saw(item.accountId, has)
    return { allowed: true, decisions: [], hasCredits: has }
  }
  const beforeBody = batched<BeforeBodyItem, BeforeBodyOutcome>(batch, beforeBodyOne, beforeBodyMany)
  const admitMany = async (items: AdmitItem[]): Promise<AdmitOutcome[]> => {
    const keys = items.map((item) => keyHoldParams(item.key, item.now))
    const { rows } = await query<ConsumeRow & { call: number; amount: string | null }>(
      `SELECT call, fits, used, amount FROM junction_admit_many($1::integer[], $2::integer[],
         $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[], $9::text[],
         $10::numeric[], $11::bigint[], $12::text[], $13::numeric[], $14::text[], $15::bigint[])`,
      [
        ...flattenChecks(items),
        items.map((item) => item.accountId),
        items.map((item) => item.id),
        items.map((item) => money(item.upperBound)),
        items.map((item) => item.now + item.ttlMs),
        ...[0, 1, 2, 3].map((j) => keys.map((k) => k[j])),
      ],
      'admit_many',
    )
    const checks: ConsumeRow[][] = items.map(() => [])
    const amounts: (string | null)[] = items.map(() => null)
    for (const r of rows) {
      if (r.fits === null) amounts[r.call - 1] = r.amount
      else checks[r.call - 1]!.push(r)
    }
    return items.map((item, i) => {
      const decided = toDecisions(item, checks[i]!)
      const amount = decided.allowed ? amounts[i] : null
      const held = toKeyHeld(amount, {
        id: item.id,
        accountId: item.accountId,
        expiresAt: item.now + item.ttlMs,
      })
      // As composeAdmission: keyLimited only for a request with a key that the limits let through.
      return { ...decided, ...(decided.allowed && item.key ? held : { reservation: held.reservation }) }
    })
  }
  const admitOne = async (item: AdmitItem): Promise<AdmitOutcome> => {
    if (item.checks.length > 0) return (await admitMany([item]))[0]!
    const expiresAt = item.now + item.ttlMs
    const { rows } = await query<{ amount: string | null }>(
      'SELECT junction_admit_one($1, $2, $3, $4, $5, $6, $7, $8, $9)::text AS amount',
      [
        item.accountId,
        item.id,
        money(item.upperBound),
        expiresAt,
        item.now,
        ...keyHoldParams(item.key, item.now),
      ],
      'admit_one',
    )
    const held = toKeyHeld(rows[0]?.amount, { id: item.id, accountId: item.accountId, expiresAt })
    return { allowed: true, decisions: [], ...(item.key ? held : { reservation: held.reservation }) }
  }
  const admit = batched<AdmitItem, AdmitOutcome>(batch, admitOne, admitMany)

  return {
    async beforeBody(accountId, checks, windowMs, now, credits) {
      if (checks.length === 0 && !credits) return { allowed: true, decisions: [], hasCredits: null }
      // Without rate checks, an account seen with credits a moment ago is not asked again.
      if (checks.length === 0 && known.has(accountId))
        return { allowed: true, decisions: [], hasCredits: true }
      return beforeBody({ accountId, checks, windowMs, now, credits })
    },
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs, key) {
      const r = await admit({ checks, windowMs, now, accountId, id, upperBound, ttlMs, key })
      if (r.allowed && (r.reservation === null || r.reservation.amount < upperBound)) known.forget(accountId)
      return r
    },
  }
}

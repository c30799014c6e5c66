import type { KeyCounters } from '../key-usage.ts'
import type { Credits } from '../types.ts'
import type { Account, ApiKeyRecord } from '../../domain/accounts.ts'
import type { GenerationRecord } from '../../domain/records.ts'

// The state one process's accounts, keys, ledger and generation records share (account creation opens
// the ledger; settle charges the account, the key and stores the record in one step), and what reads
// it. Each store method runs to completion without awaiting in between, which is what makes every
// read-modify-write atomic here (a SQL backend gets the same from one transaction). Nothing handed in
// or out is the store's own object: inputs are copied in, results copied out.

export interface AccountState {
  account: Account
  credits: bigint
  usage: bigint
  reservations: Map<string, { amount: bigint; expiresAt: number; keyHash?: string }>
  /** Generation ids, oldest settled first. */
  generations: string[]
}

export interface LedgerState {
  states: Map<string, AccountState>
  /** By hash. */
  keys: Map<string, ApiKeyRecord>
  /** By key hash. */
  counters: Map<string, KeyCounters>
  records: Map<string, GenerationRecord>
  /**
   * Every generation id ever settled: what makes a repeat a no-op after its record left the window
   * or retention (accounts are never deleted, so this is "for as long as the account exists").
   */
  settled: Set<string>
}

export function createLedgerState(): LedgerState {
  return { states: new Map(), keys: new Map(), counters: new Map(), records: new Map(), settled: new Set() }
}

// Copies by hand: structuredClone costs several microseconds on every authenticated request.
// An overdraft of 0 is no overdraft field, as the SQL stores read it back.
export const copyAccount = ({ overdraft, notices, ...a }: Account): Account => ({
  ...a,
  modelDiscountsPpm: { ...a.modelDiscountsPpm },
  rateLimits: { ...a.rateLimits },
  ...(overdraft ? { overdraft } : {}),
  ...(notices ? { notices: { ...notices } } : {}),
})

export const copyRecord = (r: GenerationRecord): GenerationRecord => ({
  ...r,
  usage: {
    ...r.usage,
    prompt_tokens_details: { ...r.usage.prompt_tokens_details },
    completion_tokens_details: { ...r.usage.completion_tokens_details },
  },
  ...(r.unbilledOverage ? { unbilledOverage: { ...r.unbilledOverage } } : {}),
})

export function mustGet(state: LedgerState, accountId: string): AccountState {
  const s = state.states.get(accountId)
  if (!s) throw new Error(`unknown account ${accountId}`)
  return s
}

/** The sum of the open holds; expired ones (their request crashed or hung) stop counting and go. */
export function openReserved(s: AccountState, now: number): bigint {
  let sum = 0n
  for (const [id, r] of s.reservations) {
    if (r.expiresAt <= now) s.reservations.delete(id)
    else sum += r.amount
  }
  return sum
}

/** The key's open holds. */
export function keyHeld(s: AccountState, keyHash: string, now: number): bigint {
  let sum = 0n
  for (const r of s.reservations.values()) if (r.keyHash === keyHash && r.expiresAt > now) sum += r.amount
  return sum
}

export function creditsOf(s: AccountState, now: number): Credits {
  return { totalCredits: s.credits, totalUsage: s.usage, reserved: openReserved(s, now) }
}

/**
 * One page of a listing kept oldest first: the `limit` ids before `before` (the newest when absent),
 * newest first, loaded; `nextCursor` names the page's last when older ones remain.
 */
export function pageBefore<T>(
  ids: readonly string[],
  limit: number,
  before: string | undefined,
  load: (id: string) => T,
): { data: T[]; nextCursor: string | null } {
  let end = ids.length
  if (before !== undefined) {
    const at = ids.lastIndexOf(before)
    end = at === -1 ? 0 : at
  }
  const start = Math.max(0, end - limit)
  const page = ids.slice(start, end).reverse()
  return { data: page.map(load), nextCursor: start > 0 && page.length > 0 ? page.at(-1)! : null }
}

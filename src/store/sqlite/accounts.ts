import { decodeNotices, encodeNotices } from '../key-usage.ts'
import type { AccountStore, AppliedConfigStore } from '../types.ts'
import type { Account } from '../../domain/accounts.ts'
import type { SqliteHelpers } from './commit.ts'
import type { SqliteKeys } from './keys.ts'

// Accounts (their balance columns are the ledger's: ledger.ts), with the key methods of keys.ts, and
// the config file's values last applied to each.

export interface AccountRow {
  id: string
  name: string
  created_at: number
  discount_ppm: number
  model_discounts_ppm: string
  rate_limits: string
  overdraft: string
  notices: string
}

export const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  createdAt: r.created_at,
  discountPpm: r.discount_ppm,
  modelDiscountsPpm: JSON.parse(r.model_discounts_ppm) as Record<string, number>,
  rateLimits: JSON.parse(r.rate_limits) as Account['rateLimits'],
  ...(r.overdraft !== '0' ? { overdraft: BigInt(r.overdraft) } : {}),
  ...(decodeNotices(r.notices) ? { notices: decodeNotices(r.notices) } : {}),
})

const overdraftOf = (a: Pick<Account, 'overdraft'>): string => (a.overdraft ?? 0n).toString()

export function createSqliteAccountStore(h: SqliteHelpers, keys: SqliteKeys): AccountStore {
  const { get, all, run, tx, read } = h
  return {
    ...keys.methods,
    async get(id) {
      const r = read(() => get<AccountRow>('SELECT * FROM accounts WHERE id = ?', id))
      return r ? toAccount(r) : null
    },
    async create(account, initialCredits) {
      return tx(
        () =>
          run(
            `INSERT INTO accounts (id, name, created_at, discount_ppm, model_discounts_ppm, rate_limits, credits, usage, overdraft, notices)
             VALUES (?, ?, ?, ?, ?, ?, ?, '0', ?, ?) ON CONFLICT (id) DO NOTHING`,
            account.id,
            account.name,
            account.createdAt,
            account.discountPpm,
            JSON.stringify(account.modelDiscountsPpm),
            JSON.stringify(account.rateLimits),
            initialCredits.toString(),
            overdraftOf(account),
            encodeNotices(account.notices),
          ) === 1,
      )
    },
    async update(id, patch) {
      return tx(() => {
        keys.changed()
        const r = get<AccountRow>('SELECT * FROM accounts WHERE id = ?', id)
        if (!r) return null
        const next: Account = { ...toAccount(r), ...patch, id, createdAt: r.created_at }
        run(
          'UPDATE accounts SET name = ?, discount_ppm = ?, model_discounts_ppm = ?, rate_limits = ?, overdraft = ?, notices = ? WHERE id = ?',
          next.name,
          next.discountPpm,
          JSON.stringify(next.modelDiscountsPpm),
          JSON.stringify(next.rateLimits),
          overdraftOf(next),
          encodeNotices(next.notices),
          id,
        )
        return toAccount({
          ...r,
          name: next.name,
          discount_ppm: next.discountPpm,
          model_discounts_ppm: JSON.stringify(next.modelDiscountsPpm),
          rate_limits: JSON.stringify(next.rateLimits),
          overdraft: overdraftOf(next),
          notices: encodeNotices(next.notices),
        })
      })
    },
    async list() {
      return read(() => all<AccountRow>('SELECT * FROM accounts ORDER BY created_at, id')).map(toAccount)
    },
  }
}

export function createSqliteAppliedConfigStore({ get, run, tx, read }: SqliteHelpers): AppliedConfigStore {
  return {
    async get(accountId) {
      const r = read(() =>
        get<{ snapshot: string }>('SELECT snapshot FROM config_applied WHERE account_id = ?', accountId),
      )
      return r?.snapshot ?? null
    },
    async set(accountId, snapshot) {
      await tx(() =>
        run(
          `INSERT INTO config_applied (account_id, snapshot) VALUES (?, ?)
           ON CONFLICT (account_id) DO UPDATE SET snapshot = excluded.snapshot`,
          accountId,
          snapshot,
        ),
      )
    },
  }
}

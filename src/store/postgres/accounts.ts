import type { AccountStore, Store } from '../types.ts'
import type { Account } from '../../domain/accounts.ts'
import { decodeNotices, encodeNotices } from '../key-usage.ts'
import { changing, type KeyCache } from './key-cache.ts'
import { money, toMoney, type Query } from './pool.ts'

// Accounts (the account half of AccountStore: keys.ts has the other) and the applied config snapshot
// of each. An account and its ledger row are created by one statement.

export interface AccountRow {
  id: string
  name: string
  created_at: string
  discount_ppm: number
  model_discounts_ppm: Record<string, number>
  rate_limits: Account['rateLimits']
  overdraft: string
  notices: string
}

export const ACCOUNT_COLUMNS =
  'a.id, a.name, a.created_at, a.discount_ppm, a.model_discounts_ppm, a.rate_limits, a.overdraft, a.notices'

export const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  createdAt: Number(r.created_at),
  discountPpm: r.discount_ppm,
  modelDiscountsPpm: r.model_discounts_ppm,
  rateLimits: r.rate_limits,
  ...(toMoney(r.overdraft) !== 0n ? { overdraft: toMoney(r.overdraft) } : {}),
  ...(decodeNotices(r.notices) ? { notices: decodeNotices(r.notices) } : {}),
})

/** The account methods of AccountStore; every change clears the key cache (key lookups carry the account). */
export function createAccounts(
  query: Query,
  cache: KeyCache,
): Pick<AccountStore, 'get' | 'create' | 'update' | 'list'> {
  return {
    async get(id) {
      const { rows } = await query<AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts a WHERE a.id = $1`, [
        id,
      ])
      return rows[0] ? toAccount(rows[0]) : null
    },
    async create(account, initialCredits) {
      // One statement: the account and its ledger exist together or not at all.
      const { rowCount } = await query(
        `WITH a AS (
           INSERT INTO accounts (id, name, created_at, discount_ppm, model_discounts_ppm, rate_limits, overdraft, notices)
           VALUES ($1, $2, $3, $4, $5, $6, $8, $9) ON CONFLICT (id) DO NOTHING RETURNING id)
         INSERT INTO ledger (account_id, credits, usage) SELECT id, $7, 0 FROM a`,
        [
          account.id,
          account.name,
          account.createdAt,
          account.discountPpm,
          JSON.stringify(account.modelDiscountsPpm),
          JSON.stringify(account.rateLimits),
          money(initialCredits),
          money(account.overdraft ?? 0n),
          encodeNotices(account.notices),
        ],
      )
      return rowCount === 1
    },
    async update(id, patch) {
      const json = (v: object | undefined) => (v === undefined ? null : JSON.stringify(v))
      const { rows } = await changing(
        cache,
        query<AccountRow>(
          `UPDATE accounts a SET
           name = coalesce($2, a.name),
           discount_ppm = coalesce($3, a.discount_ppm),
           model_discounts_ppm = coalesce($4::jsonb, a.model_discounts_ppm),
           rate_limits = coalesce($5::jsonb, a.rate_limits),
           overdraft = coalesce($6::numeric, a.overdraft),
           notices = coalesce($7, a.notices)
         WHERE a.id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
          [
            id,
            patch.name ?? null,
            patch.discountPpm ?? null,
            json(patch.modelDiscountsPpm),
            json(patch.rateLimits),
            patch.overdraft === undefined ? null : money(patch.overdraft),
            patch.notices === undefined ? null : encodeNotices(patch.notices),
          ],
        ),
      )
      return rows[0] ? toAccount(rows[0]) : null
    },
    async list() {
      const { rows } = await query<AccountRow>(
        `SELECT ${ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.id`,
      )
      return rows.map(toAccount)
    },
  }
}

export function createAppliedConfig(query: Query): Store['appliedConfig'] {
  return {
    async get(accountId) {
      const { rows } = await query<{ snapshot: string }>(
        'SELECT snapshot FROM config_applied WHERE account_id = $1',
        [accountId],
      )
      return rows[0]?.snapshot ?? null
    },
    async set(accountId, snapshot) {
      await query(
        `INSERT INTO config_applied (account_id, snapshot) VALUES ($1, $2)
           ON CONFLICT (account_id) DO UPDATE SET snapshot = excluded.snapshot`,
        [accountId, snapshot],
      )
    },
  }
}

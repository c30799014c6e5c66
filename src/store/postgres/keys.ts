import type { AccountStore, KeyLookup } from '../types.ts'
import type { ApiKeyRecord } from '../../domain/accounts.ts'
import { copyLookup } from '../copies.ts'
import { decodeKeySettings, encodeKeySettings } from '../key-usage.ts'
import { ACCOUNT_COLUMNS, toAccount, type AccountRow } from './accounts.ts'
import { batched, type Batch } from './batch.ts'
import { changing, KEY_CACHE, KEY_CACHE_MAX_AGE_MS, type KeyCache } from './key-cache.ts'
import { isUnknownAccount, type Query, type Transaction } from './pool.ts'

// API keys (the key half of AccountStore: accounts.ts has the other). The lookup every request makes
// is batched and answered from key-cache.ts while it may be; every change clears that cache.

interface KeyRow {
  id: string
  account_id: string
  hash: string
  prefix: string
  created_at: string
  settings: string
}

const KEY_COLUMNS = 'k.id, k.account_id, k.hash, k.prefix, k.created_at, k.settings'

const toKey = (r: KeyRow): ApiKeyRecord => ({
  id: r.id,
  accountId: r.account_id,
  hash: r.hash,
  prefix: r.prefix,
  createdAt: Number(r.created_at),
  ...decodeKeySettings(r.settings),
})

/** A key and its account from one row (the key's columns aliased k_*). */
type KeyAccountRow = AccountRow & {
  k_id: string
  k_hash: string
  k_prefix: string
  k_created_at: string
  k_settings: string
}
const KEY_ACCOUNT_COLUMNS = `k.id AS k_id, k.hash AS k_hash, k.prefix AS k_prefix, k.created_at AS k_created_at,
  k.settings AS k_settings, ${ACCOUNT_COLUMNS}`
const toLookup = (r: KeyAccountRow): KeyLookup => ({
  account: toAccount(r),
  key: toKey({
    id: r.k_id,
    account_id: r.id,
    hash: r.k_hash,
    prefix: r.k_prefix,
    created_at: r.k_created_at,
    settings: r.k_settings,
  }),
})

/** The key lookup every request makes: batched, cached while the cache may be used. */
function createFindKey(query: Query, batch: Batch, cache: KeyCache): AccountStore['findKey'] {
  const lookUp = batched<string, KeyLookup | null>(
    batch,
    async (keyHash) => {
      const { rows } = await query<KeyAccountRow>(
        `SELECT ${KEY_ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = $1`,
        [keyHash],
        'account_by_key',
      )
      return rows[0] ? toLookup(rows[0]) : null
    },
    async (hashes) => {
      const { rows } = await query<KeyAccountRow>(
        `SELECT ${KEY_ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.hash = ANY ($1::text[])`,
        [hashes],
        'accounts_by_keys',
      )
      const found = new Map(rows.map((r) => [r.k_hash, r]))
      // Each caller gets its own objects, also when one batch looked the same key up twice.
      return hashes.map((h) => {
        const r = found.get(h)
        return r ? toLookup(r) : null
      })
    },
  )
  // Every request looks its key up: answered from the cache while it may be used; only keys that exist
  // are kept (an unknown key costs a query, not memory).
  const findKey = async (keyHash: string): Promise<KeyLookup | null> => {
    const sentAt = performance.now()
    const hit = cache.live ? cache.entries.get(keyHash) : undefined
    if (hit && sentAt - hit.at < KEY_CACHE_MAX_AGE_MS) return copyLookup(hit.found)
    const epoch = cache.epoch
    const found = await lookUp(keyHash)
    if (found && cache.live && cache.epoch === epoch) {
      if (cache.entries.size >= KEY_CACHE) cache.entries.clear()
      cache.entries.set(keyHash, { found: copyLookup(found), at: sentAt })
    }
    return found
  }
  return findKey
}

type KeyMethods = 'findKey' | 'findByKeyHash' | 'getKey' | 'updateKey' | 'addKey' | 'listKeys' | 'removeKey'

/** The key methods of AccountStore. */
export function createKeys(
  query: Query,
  transaction: Transaction,
  batch: Batch,
  cache: KeyCache,
): Pick<AccountStore, KeyMethods> {
  const findKey = createFindKey(query, batch, cache)
  return {
    findKey,
    async findByKeyHash(keyHash) {
      return (await findKey(keyHash))?.account ?? null
    },
    async getKey(accountId, keyHash) {
      const { rows } = await query<KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 AND k.hash = $2`,
        [accountId, keyHash],
      )
      return rows[0] ? toKey(rows[0]) : null
    },
    async updateKey(accountId, keyHash, patch) {
      return changing(
        cache,
        transaction(async (q) => {
          const { rows } = await q<KeyRow>(
            `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 AND k.hash = $2 FOR UPDATE`,
            [accountId, keyHash],
          )
          if (!rows[0]) return null
          const settings = encodeKeySettings({ ...toKey(rows[0]), ...patch })
          await q('UPDATE api_keys SET settings = $2 WHERE hash = $1', [keyHash, settings])
          return toKey({ ...rows[0], settings })
        }),
      )
    },
    async addKey(key) {
      try {
        await changing(
          cache,
          query(
            `INSERT INTO api_keys (hash, id, account_id, prefix, created_at, settings) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (hash) DO UPDATE SET id = excluded.id, account_id = excluded.account_id,
             prefix = excluded.prefix, created_at = excluded.created_at, settings = excluded.settings`,
            [key.hash, key.id, key.accountId, key.prefix, key.createdAt, encodeKeySettings(key)],
          ),
        )
      } catch (err) {
        if (isUnknownAccount(err)) throw new Error(`unknown account ${key.accountId}`, { cause: err })
        throw err
      }
    },
    async listKeys(accountId) {
      const { rows } = await query<KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 ORDER BY k.created_at, k.id`,
        [accountId],
      )
      return rows.map(toKey)
    },
    async removeKey(accountId, keyId) {
      const { rowCount } = await changing(
        cache,
        query('DELETE FROM api_keys WHERE account_id = $1 AND id = $2', [accountId, keyId]),
      )
      return (rowCount ?? 0) > 0
    },
  }
}

import { copyLookup } from '../copies.ts'
import { decodeKeySettings, encodeKeySettings, type KeyCounters } from '../key-usage.ts'
import type { AccountStore, KeyLookup } from '../types.ts'
import type { ApiKeyRecord } from '../../domain/accounts.ts'
import { toAccount, type AccountRow } from './accounts.ts'
import type { SqliteHelpers } from './commit.ts'

// API keys: their rows, the lookup every request makes (cached), the AccountStore's key methods, and
// what each key has spent (its counters, written by the ledger's settle: ledger.ts).

/** Accounts of API keys kept in memory for the lookup every request makes, at most. */
export const KEY_CACHE = 10_000

export interface KeyRow {
  hash: string
  id: string
  account_id: string
  prefix: string
  created_at: number
  settings: string
}

export const toKey = (r: KeyRow): ApiKeyRecord => ({
  id: r.id,
  accountId: r.account_id,
  hash: r.hash,
  prefix: r.prefix,
  createdAt: r.created_at,
  ...decodeKeySettings(r.settings),
})

/** The key lookup's cache, and the methods that change keys (they clear it). */
export interface SqliteKeys {
  findKey(keyHash: string): KeyLookup | null
  /** Accounts or keys changed through this connection: the cache is cleared. */
  changed(): void
  /** Counts the clearings of the cache: the event loop's copy of it is stale when it moved. */
  epoch(): number
  methods: Pick<
    AccountStore,
    'findByKeyHash' | 'findKey' | 'getKey' | 'updateKey' | 'addKey' | 'listKeys' | 'removeKey'
  >
}

// Every request looks its key up, and a statement outside a transaction costs ≈10 µs of file locking
// however small it is: the accounts of keys seen are kept here. This connection's own changes to
// accounts or keys clear them at once. Another connection's commit (another process on the file)
// changes PRAGMA data_version, which is read at most every `keyCacheCheckMs`: a key revoked or an
// account changed through another process takes effect here within that time. Only keys that exist
// are kept (unknown keys cost a query, not memory), at most KEY_CACHE.
export function createSqliteKeys(h: SqliteHelpers, keyCacheCheckMs: number): SqliteKeys {
  const { get, read } = h
  const keyCache = new Map<string, KeyLookup>()
  let dataVersion = -1
  let checkedAt = Number.NEGATIVE_INFINITY
  let epoch = 0
  const changed = (): void => {
    keyCache.clear()
    epoch++
  }
  const findKey = (keyHash: string): KeyLookup | null =>
    read(() => {
      const now = performance.now()
      if (now - checkedAt >= keyCacheCheckMs) {
        const version = get<{ data_version: number }>('PRAGMA data_version')!.data_version
        if (version !== dataVersion) changed()
        dataVersion = version
        checkedAt = now
      }
      const cached = keyCache.get(keyHash)
      if (cached) return copyLookup(cached)
      const found = lookUpKey(h, keyHash)
      if (!found) return null
      if (keyCache.size >= KEY_CACHE) keyCache.clear()
      keyCache.set(keyHash, found)
      return copyLookup(found)
    })
  return { findKey, changed, epoch: () => epoch, methods: keyMethods(h, findKey, changed) }
}

/** The key and its account, read from the file. */
function lookUpKey({ get }: SqliteHelpers, keyHash: string): KeyLookup | null {
  const r = get<AccountRow & { k_id: string; k_prefix: string; k_created_at: number; k_settings: string }>(
    `SELECT a.*, k.id AS k_id, k.prefix AS k_prefix, k.created_at AS k_created_at, k.settings AS k_settings
     FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = ?`,
    keyHash,
  )
  if (!r) return null
  return {
    account: toAccount(r),
    key: toKey({
      hash: keyHash,
      id: r.k_id,
      account_id: r.id,
      prefix: r.k_prefix,
      created_at: r.k_created_at,
      settings: r.k_settings,
    }),
  }
}

function keyMethods(
  { get, all, run, tx, read }: SqliteHelpers,
  findKey: (keyHash: string) => KeyLookup | null,
  changed: () => void,
): SqliteKeys['methods'] {
  return {
    async findByKeyHash(keyHash) {
      return findKey(keyHash)?.account ?? null
    },
    async findKey(keyHash) {
      return findKey(keyHash)
    },
    async getKey(accountId, keyHash) {
      const r = read(() =>
        get<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? AND hash = ?', accountId, keyHash),
      )
      return r ? toKey(r) : null
    },
    async updateKey(accountId, keyHash, patch) {
      return tx(() => {
        changed()
        const r = get<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? AND hash = ?', accountId, keyHash)
        if (!r) return null
        const settings = encodeKeySettings({ ...toKey(r), ...patch })
        run('UPDATE api_keys SET settings = ? WHERE hash = ?', settings, keyHash)
        return toKey({ ...r, settings })
      })
    },
    async addKey(key) {
      await tx(() => {
        changed()
        if (!get('SELECT credits, usage FROM accounts WHERE id = ?', key.accountId)) {
          throw new Error(`unknown account ${key.accountId}`)
        }
        run(
          `INSERT INTO api_keys (hash, id, account_id, prefix, created_at, settings) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (hash) DO UPDATE SET id = excluded.id, account_id = excluded.account_id,
             prefix = excluded.prefix, created_at = excluded.created_at, settings = excluded.settings`,
          key.hash,
          key.id,
          key.accountId,
          key.prefix,
          key.createdAt,
          encodeKeySettings(key),
        )
      })
    },
    async listKeys(accountId) {
      return read(() =>
        all<KeyRow>('SELECT * FROM api_keys WHERE account_id = ? ORDER BY created_at, id', accountId),
      ).map(toKey)
    },
    async removeKey(accountId, keyId) {
      return tx(() => {
        changed()
        return run('DELETE FROM api_keys WHERE account_id = ? AND id = ?', accountId, keyId) > 0
      })
    },
  }
}

interface CountersRow {
  total: string
  day_start: number
  day: string
  week_start: number
  week: string
  month_start: number
  month: string
}

/** What the key has spent, by window; undefined before its first charge. */
export function countersOf({ get }: SqliteHelpers, keyHash: string): KeyCounters | undefined {
  const r = get<CountersRow>('SELECT * FROM key_usage WHERE key_hash = ?', keyHash)
  return (
    r && {
      total: BigInt(r.total),
      dayStart: r.day_start,
      day: BigInt(r.day),
      weekStart: r.week_start,
      week: BigInt(r.week),
      monthStart: r.month_start,
      month: BigInt(r.month),
    }
  )
}

export function writeCounters({ run }: SqliteHelpers, keyHash: string, c: KeyCounters): void {
  run(
    `INSERT INTO key_usage (key_hash, total, day_start, day, week_start, week, month_start, month)
     VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (key_hash) DO UPDATE SET total = excluded.total, day_start = excluded.day_start,
       day = excluded.day, week_start = excluded.week_start, week = excluded.week,
       month_start = excluded.month_start, month = excluded.month`,
    keyHash,
    c.total.toString(),
    c.dayStart,
    c.day.toString(),
    c.weekStart,
    c.week.toString(),
    c.monthStart,
    c.month.toString(),
  )
}

// The holds made with a key, open or expired, summed on the key's row of `key_held`, kept by triggers on
// reservations (migration 10) like the account's `held`: a key with a spending limit then reads one row
// at each hold, however many of its requests are in flight. Like PostgreSQL's (migration 17), the total
// is the key's whatever account its holds are under (a key moved to another account with holds open
// counts them until they end). A key has a row from the first time its holds are asked for, or the
// first after its total outgrew what the triggers add up exactly: they are summed once then (no index
// leads to a key's holds; the triggers keep the row from then on).

export const sumAmounts = (rows: { amount: string }[]): bigint =>
  rows.reduce((sum, r) => sum + BigInt(r.amount), 0n)

/** The key's open holds at `now`: its kept total (summed and kept the first time) less its expired ones. */
export function keyHeldOf(h: SqliteHelpers, keyHash: string, now: number): bigint {
  const kept = h.get<{ held: string }>('SELECT held FROM key_held WHERE key_hash = ?', keyHash)
  let total: bigint
  if (kept) total = BigInt(kept.held)
  else {
    total = sumAmounts(
      h.all<{ amount: string }>('SELECT amount FROM reservations WHERE key_hash = ?', keyHash),
    )
    h.run('INSERT INTO key_held (key_hash, held) VALUES (?, ?)', keyHash, total.toString())
  }
  const expired = h.all<{ amount: string }>(
    'SELECT amount FROM reservations INDEXED BY reservations_by_expiry WHERE expires_at <= ? AND key_hash = ?',
    now,
    keyHash,
  )
  return total - sumAmounts(expired)
}

import { copyKey } from '../copies.ts'
import { normalizeKey } from '../key-usage.ts'
import type { AccountStore, KeyLookup } from '../types.ts'
import { copyAccount, mustGet, type LedgerState } from './state.ts'

// The API-key half of the AccountStore (accounts.ts adds the accounts' own methods); what a key has
// spent is counted by the ledger's settle (ledger.ts).

export type KeyMethods = Pick<
  AccountStore,
  'findByKeyHash' | 'findKey' | 'getKey' | 'updateKey' | 'addKey' | 'listKeys' | 'removeKey'
>

export function createMemoryKeyMethods(state: LedgerState): KeyMethods {
  const { keys, states } = state
  const findKey = (keyHash: string): KeyLookup | null => {
    const key = keys.get(keyHash)
    const s = key && states.get(key.accountId)
    return s ? { account: copyAccount(s.account), key: copyKey(key) } : null
  }
  return {
    async findByKeyHash(keyHash) {
      return findKey(keyHash)?.account ?? null
    },
    async findKey(keyHash) {
      return findKey(keyHash)
    },
    async getKey(accountId, keyHash) {
      const k = keys.get(keyHash)
      return k && k.accountId === accountId ? copyKey(k) : null
    },
    async updateKey(accountId, keyHash, patch) {
      const k = keys.get(keyHash)
      if (!k || k.accountId !== accountId) return null
      const next = normalizeKey({ ...k, ...patch })
      keys.set(keyHash, next)
      return copyKey(next)
    },
    async addKey(key) {
      mustGet(state, key.accountId)
      keys.set(key.hash, normalizeKey(key))
    },
    async listKeys(accountId) {
      return [...keys.values()]
        .filter((k) => k.accountId === accountId)
        .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
        .map(copyKey)
    },
    async removeKey(accountId, keyId) {
      for (const [hash, k] of keys) {
        if (k.id === keyId && k.accountId === accountId) return keys.delete(hash)
      }
      return false
    },
  }
}

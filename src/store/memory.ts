import type { Account, AccountStore, Store } from './types.ts'

export function createMemoryAccountStore(): AccountStore {
  const accounts = new Map<string, Account>()
  const keyOwner = new Map<string, string>()
  return {
    async findByKeyHash(keyHash) {
      const id = keyOwner.get(keyHash)
      return id === undefined ? null : (accounts.get(id) ?? null)
    },
    async get(id) {
      return accounts.get(id) ?? null
    },
    async upsert(account) {
      if (!accounts.has(account.id)) accounts.set(account.id, { ...account })
    },
    async addKey(accountId, keyHash) {
      if (!accounts.has(accountId)) throw new Error(`unknown account ${accountId}`)
      keyOwner.set(keyHash, accountId)
    },
    async removeKey(keyHash) {
      return keyOwner.delete(keyHash)
    },
    async list() {
      return [...accounts.values()].sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
    },
  }
}

export function createMemoryStore(): Store {
  return {
    accounts: createMemoryAccountStore(),
    async ping() {},
    async close() {},
  }
}

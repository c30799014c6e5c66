import type { AccountStore } from '../types.ts'
import { createMemoryKeyMethods } from './keys.ts'
import { copyAccount, type LedgerState } from './state.ts'

// Accounts over the ledger's state (state.ts): creating one opens its ledger in the same step.

export function createMemoryAccountStore(state: LedgerState): AccountStore {
  const { states } = state
  return {
    ...createMemoryKeyMethods(state),
    async get(id) {
      const s = states.get(id)
      return s ? copyAccount(s.account) : null
    },
    async create(account, initialCredits) {
      if (states.has(account.id)) return false
      states.set(account.id, {
        account: copyAccount(account),
        credits: initialCredits,
        usage: 0n,
        reservations: new Map(),
        generations: [],
      })
      return true
    },
    async update(id, patch) {
      const s = states.get(id)
      if (!s) return null
      s.account = copyAccount({ ...s.account, ...patch, id, createdAt: s.account.createdAt })
      return copyAccount(s.account)
    },
    async list() {
      return [...states.values()]
        .map((s) => s.account)
        .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
        .map(copyAccount)
    },
  }
}

import type { ResponseStore, StoredResponse } from '../types.ts'

// Stored Responses API answers in one process, copied in and out.

const clone = <T>(v: T): T => structuredClone(v)

export function createMemoryResponseStore(): ResponseStore {
  const byId = new Map<string, StoredResponse>()
  return {
    async put(r) {
      byId.set(r.id, clone(r))
    },
    async get(accountId, id) {
      const r = byId.get(id)
      return r && r.accountId === accountId ? clone(r) : null
    },
    async delete(accountId, id) {
      const r = byId.get(id)
      if (!r || r.accountId !== accountId) return false
      return byId.delete(id)
    },
    async deleteBefore(cutoff) {
      for (const [id, r] of byId) if (r.createdAt < cutoff) byId.delete(id)
    },
  }
}

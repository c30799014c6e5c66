import type { FileStore, StoredFile } from '../types.ts'

// The in-memory FileStore (the interface: types.ts).

interface AccountFiles {
  /** Insertion order is commit order, oldest first. */
  files: Map<string, StoredFile>
  bytes: number
  /** Uploads in progress: token → expiresAt. */
  pending: Map<string, number>
}

export function createMemoryFileStore(): FileStore {
  const accounts = new Map<string, AccountFiles>()
  const tokens = new Map<string, string>() // token → accountId
  /** Every stored file's id: unique over all accounts, as the SQL backends' primary key makes it. */
  const ids = new Set<string>()
  let nextToken = 0

  const accountFiles = (accountId: string): AccountFiles => {
    let a = accounts.get(accountId)
    if (!a) {
      a = { files: new Map(), bytes: 0, pending: new Map() }
      accounts.set(accountId, a)
    }
    return a
  }

  /** Removes the token; its account's files, or null when the token is unknown (already gone). */
  const dropToken = (token: string): { a: AccountFiles; expiresAt: number } | null => {
    const accountId = tokens.get(token)
    if (accountId === undefined) return null
    tokens.delete(token)
    const a = accountFiles(accountId)
    const expiresAt = a.pending.get(token) ?? 0
    a.pending.delete(token)
    return { a, expiresAt }
  }

  // Every check-and-update below runs without an await in between: atomic within one process.
  return {
    async reserve(accountId, quota, now, ttlMs) {
      const a = accountFiles(accountId)
      for (const [token, expiresAt] of a.pending) if (expiresAt <= now) dropToken(token)
      if (a.files.size + a.pending.size >= quota.maxFiles) return { ok: false, reason: 'files' }
      if (a.bytes >= quota.maxBytes) return { ok: false, reason: 'bytes' }
      const token = `r${++nextToken}`
      tokens.set(token, accountId)
      a.pending.set(token, now + ttlMs)
      return { ok: true, token, bytesLeft: quota.maxBytes - a.bytes }
    },
    async commit(token, file, quota, now) {
      const owner = tokens.get(token)
      if (owner === undefined) return false
      if (owner !== file.accountId) throw new Error('file reservation of another account')
      // A bug, as a SQL backend's unique violation is: nothing changes, the reservation stays.
      if (ids.has(file.id)) throw new Error(`file ${file.id} exists`)
      const { a, expiresAt } = dropToken(token)!
      if (expiresAt <= now) return false
      if (a.bytes + file.bytes > quota.maxBytes) return false
      a.files.set(file.id, { ...file })
      ids.add(file.id)
      a.bytes += file.bytes
      return true
    },
    async release(token) {
      dropToken(token)
    },
    async get(accountId, id) {
      const f = accounts.get(accountId)?.files.get(id)
      return f ? { ...f } : null
    },
    async list(accountId, query) {
      const all = [...(accounts.get(accountId)?.files.values() ?? [])]
      if (query.order !== 'asc') all.reverse()
      let files = query.purpose === undefined ? all : all.filter((f) => f.purpose === query.purpose)
      if (query.after !== undefined) {
        const i = files.findIndex((f) => f.id === query.after)
        files = i === -1 ? [] : files.slice(i + 1)
      }
      return {
        files: files.slice(0, query.limit).map((f) => ({ ...f })),
        hasMore: files.length > query.limit,
      }
    },
    async delete(accountId, id) {
      const a = accounts.get(accountId)
      const f = a?.files.get(id)
      if (!a || !f) return null
      a.files.delete(id)
      ids.delete(id)
      a.bytes -= f.bytes
      return { ...f }
    },
    async usage(accountId) {
      const a = accounts.get(accountId)
      return { files: a?.files.size ?? 0, bytes: a?.bytes ?? 0 }
    },
    async existingKeys(storageKeys) {
      const wanted = new Set(storageKeys)
      const found = new Set<string>()
      for (const a of accounts.values()) {
        for (const f of a.files.values()) if (wanted.has(f.storageKey)) found.add(f.storageKey)
      }
      return found
    },
  }
}

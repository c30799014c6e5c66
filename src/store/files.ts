// File metadata: the FileStore interface and its in-memory implementation. The bytes themselves live
// in a FileStorage (src/files/storage.ts); a record points at them by `storageKey`.

export const FILE_PURPOSES = ['assistants', 'batch', 'fine-tune', 'vision', 'user_data'] as const
export type FilePurpose = (typeof FILE_PURPOSES)[number]

export interface StoredFile {
  /** `file-…`, the public id. */
  id: string
  accountId: string
  bytes: number
  /** Epoch milliseconds. */
  createdAt: number
  /** As the client sent it; metadata only, never part of a storage path. */
  filename: string
  purpose: FilePurpose
  /** The upload's media type, served back by the content endpoint and used in data URLs. */
  contentType: string
  /** The FileStorage object holding the bytes. */
  storageKey: string
}

export interface FileQuota {
  maxFiles: number
  maxBytes: number
}

export type FileReservation =
  | {
      ok: true
      token: string
      /** What the account may still store, uploads in progress aside. */ bytesLeft: number
    }
  | { ok: false; reason: 'files' | 'bytes' }

export interface FileListQuery {
  purpose?: FilePurpose
  /** Newest first unless `asc`. */
  order?: 'asc' | 'desc'
  /** Only files after this id, in the list's order (cursor pagination). */
  after?: string
  limit: number
}

export interface FileStore {
  /**
   * Holds one file slot of the account's quota for an upload in progress, so parallel uploads cannot
   * together exceed the file count. Every successful reservation ends in `commit` or `release`.
   */
  reserve(accountId: string, quota: FileQuota): Promise<FileReservation>
  /**
   * Turns the reservation into the file record, checking the byte quota atomically with the insert.
   * False (and the reservation released) when the account's bytes would exceed `quota.maxBytes`.
   */
  commit(token: string, file: StoredFile, quota: FileQuota): Promise<boolean>
  release(token: string): Promise<void>
  /** The account's own file, or null (also for another account's id). */
  get(accountId: string, id: string): Promise<StoredFile | null>
  list(accountId: string, query: FileListQuery): Promise<{ files: StoredFile[]; hasMore: boolean }>
  /** Removes the account's own file record and returns it, or null. */
  delete(accountId: string, id: string): Promise<StoredFile | null>
  usage(accountId: string): Promise<{ files: number; bytes: number }>
}

interface AccountFiles {
  /** Insertion order is commit order, oldest first. */
  files: Map<string, StoredFile>
  bytes: number
  pending: number
}

export function createMemoryFileStore(): FileStore {
  const accounts = new Map<string, AccountFiles>()
  const reservations = new Map<string, string>()
  let nextToken = 0

  const accountFiles = (accountId: string): AccountFiles => {
    let a = accounts.get(accountId)
    if (!a) {
      a = { files: new Map(), bytes: 0, pending: 0 }
      accounts.set(accountId, a)
    }
    return a
  }

  const releaseToken = (token: string): AccountFiles | null => {
    const accountId = reservations.get(token)
    if (accountId === undefined) return null
    reservations.delete(token)
    const a = accountFiles(accountId)
    a.pending--
    return a
  }

  // Every check-and-update below runs without an await in between: atomic within one process.
  return {
    async reserve(accountId, quota) {
      const a = accountFiles(accountId)
      if (a.files.size + a.pending >= quota.maxFiles) return { ok: false, reason: 'files' }
      if (a.bytes >= quota.maxBytes) return { ok: false, reason: 'bytes' }
      const token = `r${++nextToken}`
      reservations.set(token, accountId)
      a.pending++
      return { ok: true, token, bytesLeft: quota.maxBytes - a.bytes }
    },
    async commit(token, file, quota) {
      if (reservations.get(token) !== file.accountId) throw new Error('unknown file reservation')
      const a = releaseToken(token)!
      if (a.bytes + file.bytes > quota.maxBytes) return false
      a.files.set(file.id, { ...file })
      a.bytes += file.bytes
      return true
    },
    async release(token) {
      releaseToken(token)
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
      a.bytes -= f.bytes
      return f
    },
    async usage(accountId) {
      const a = accounts.get(accountId)
      return { files: a?.files.size ?? 0, bytes: a?.bytes ?? 0 }
    },
  }
}

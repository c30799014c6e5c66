import { randomUUID } from 'node:crypto'
import type { FileStore, StoredFile } from '../types.ts'
import type { SqliteHelpers } from './commit.ts'

// File records and upload holds in the file (the bytes are in a FileStorage).

interface FileRow {
  seq: number
  id: string
  account_id: string
  bytes: number
  created_at: number
  filename: string
  purpose: StoredFile['purpose']
  content_type: string
  storage_key: string
}
const toFile = (r: FileRow): StoredFile => ({
  id: r.id,
  accountId: r.account_id,
  bytes: r.bytes,
  createdAt: r.created_at,
  filename: r.filename,
  purpose: r.purpose,
  contentType: r.content_type,
  storageKey: r.storage_key,
})
const usageOfAccount = ({ get }: SqliteHelpers, accountId: string) =>
  get<{ files: number; bytes: number }>(
    'SELECT count(*) AS files, coalesce(sum(bytes), 0) AS bytes FROM files WHERE account_id = ?',
    accountId,
  )!

export function createSqliteFileStore(h: SqliteHelpers): FileStore {
  const { get, all, run, tx, read } = h
  const usageOf = (accountId: string) => usageOfAccount(h, accountId)
  return {
    async reserve(accountId, quota, now, ttlMs) {
      return tx(() => {
        run('DELETE FROM file_holds WHERE account_id = ? AND expires_at <= ?', accountId, now)
        const u = usageOf(accountId)
        const held = get<{ n: number }>(
          'SELECT count(*) AS n FROM file_holds WHERE account_id = ?',
          accountId,
        )!.n
        if (u.files + held >= quota.maxFiles) return { ok: false, reason: 'files' } as const
        if (u.bytes >= quota.maxBytes) return { ok: false, reason: 'bytes' } as const
        const token = randomUUID()
        run(
          'INSERT INTO file_holds (token, account_id, expires_at) VALUES (?, ?, ?)',
          token,
          accountId,
          now + ttlMs,
        )
        return { ok: true, token, bytesLeft: quota.maxBytes - u.bytes } as const
      })
    },
    async commit(token, file, quota, now) {
      return tx(() => {
        const hold = get<{ account_id: string; expires_at: number }>(
          'SELECT account_id, expires_at FROM file_holds WHERE token = ?',
          token,
        )
        if (!hold) return false
        if (hold.account_id !== file.accountId) throw new Error('file reservation of another account')
        run('DELETE FROM file_holds WHERE token = ?', token)
        if (hold.expires_at <= now) return false
        if (usageOf(file.accountId).bytes + file.bytes > quota.maxBytes) return false
        run(
          `INSERT INTO files (id, account_id, bytes, created_at, filename, purpose, content_type, storage_key)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
          file.id,
          file.accountId,
          file.bytes,
          file.createdAt,
          file.filename,
          file.purpose,
          file.contentType,
          file.storageKey,
        )
        return true
      })
    },
    async release(token) {
      await tx(() => run('DELETE FROM file_holds WHERE token = ?', token))
    },
    async get(accountId, id) {
      const r = read(() => get<FileRow>('SELECT * FROM files WHERE account_id = ? AND id = ?', accountId, id))
      return r ? toFile(r) : null
    },
    async list(accountId, query) {
      const asc = query.order === 'asc'
      const rows = read(() => {
        let from: number | undefined
        if (query.after !== undefined) {
          const at = get<{ seq: number; purpose: string }>(
            'SELECT seq, purpose FROM files WHERE account_id = ? AND id = ?',
            accountId,
            query.after,
          )
          if (!at || (query.purpose !== undefined && at.purpose !== query.purpose)) return []
          from = at.seq
        }
        const purpose = query.purpose ?? null
        const bound = from ?? (asc ? -1 : Number.MAX_SAFE_INTEGER)
        return asc
          ? all<FileRow>(
              `SELECT * FROM files WHERE account_id = ? AND (? IS NULL OR purpose = ?) AND seq > ?
               ORDER BY seq ASC LIMIT ?`,
              accountId,
              purpose,
              purpose,
              bound,
              query.limit + 1,
            )
          : all<FileRow>(
              `SELECT * FROM files WHERE account_id = ? AND (? IS NULL OR purpose = ?) AND seq < ?
               ORDER BY seq DESC LIMIT ?`,
              accountId,
              purpose,
              purpose,
              bound,
              query.limit + 1,
            )
      })
      return { files: rows.slice(0, query.limit).map(toFile), hasMore: rows.length > query.limit }
    },
    async delete(accountId, id) {
      return tx(() => {
        const r = get<FileRow>('SELECT * FROM files WHERE account_id = ? AND id = ?', accountId, id)
        if (!r) return null
        run('DELETE FROM files WHERE seq = ?', r.seq)
        return toFile(r)
      })
    },
    async usage(accountId) {
      return read(() => ({ ...usageOf(accountId) }))
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const rows = read(() =>
        all<{ storage_key: string }>(
          'SELECT storage_key FROM files WHERE storage_key IN (SELECT value FROM json_each(?))',
          JSON.stringify(storageKeys),
        ),
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }
}

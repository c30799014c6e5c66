import { randomUUID } from 'node:crypto'
import type { FilePurpose, FileStore, StoredFile } from '../types.ts'
import type { Query, Transaction } from './pool.ts'

// Uploaded files and their per-account totals; a quota check locks the account's totals row.

interface FileRow {
  id: string
  account_id: string
  bytes: string
  created_at: string
  filename: string
  purpose: FilePurpose
  content_type: string
  storage_key: string
}

const FILE_COLUMNS = 'id, account_id, bytes, created_at, filename, purpose, content_type, storage_key'

const toFile = (r: FileRow): StoredFile => ({
  id: r.id,
  accountId: r.account_id,
  bytes: Number(r.bytes),
  createdAt: Number(r.created_at),
  filename: r.filename,
  purpose: r.purpose,
  contentType: r.content_type,
  storageKey: r.storage_key,
})

export function createFiles(query: Query, transaction: Transaction): FileStore {
  return {
    async reserve(accountId, quota, now, ttlMs) {
      return transaction(async (q) => {
        // The upsert locks the account's totals row: its quota checks run one at a time.
        const totals = await q<{ files: number; bytes: string }>(
          `INSERT INTO file_accounts (account_id) VALUES ($1)
           ON CONFLICT (account_id) DO UPDATE SET account_id = excluded.account_id RETURNING files, bytes`,
          [accountId],
        )
        const { files, bytes } = totals.rows[0]!
        const holds = await q<{ n: number }>(
          'SELECT count(*)::int AS n FROM file_holds WHERE account_id = $1 AND expires_at > $2',
          [accountId, now],
        )
        if (files + holds.rows[0]!.n >= quota.maxFiles) return { ok: false, reason: 'files' } as const
        if (Number(bytes) >= quota.maxBytes) return { ok: false, reason: 'bytes' } as const
        const token = randomUUID()
        await q('INSERT INTO file_holds (token, account_id, expires_at) VALUES ($1, $2, $3)', [
          token,
          accountId,
          now + ttlMs,
        ])
        return { ok: true, token, bytesLeft: quota.maxBytes - Number(bytes) } as const
      })
    },
    async commit(token, file, quota, now) {
      return transaction(async (q) => {
        const hold = await q<{ account_id: string }>('SELECT account_id FROM file_holds WHERE token = $1', [
          token,
        ])
        const owner = hold.rows[0]?.account_id
        if (owner === undefined) return false
        if (owner !== file.accountId) throw new Error('file reservation of another account')
        const totals = await q<{ bytes: string }>(
          'SELECT bytes FROM file_accounts WHERE account_id = $1 FOR UPDATE',
          [owner],
        )
        // Deleted under the lock: a concurrent commit or release of the same token finds nothing.
        const dropped = await q<{ expires_at: string }>(
          'DELETE FROM file_holds WHERE token = $1 RETURNING expires_at',
          [token],
        )
        const expiresAt = dropped.rows[0]?.expires_at
        if (expiresAt === undefined || Number(expiresAt) <= now) return false
        if (Number(totals.rows[0]?.bytes ?? 0) + file.bytes > quota.maxBytes) return false
        await q(
          `INSERT INTO files (account_id, id, bytes, created_at, filename, purpose, content_type, storage_key)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
          [
            file.accountId,
            file.id,
            file.bytes,
            file.createdAt,
            file.filename,
            file.purpose,
            file.contentType,
            file.storageKey,
          ],
        )
        await q('UPDATE file_accounts SET files = files + 1, bytes = bytes + $2 WHERE account_id = $1', [
          owner,
          file.bytes,
        ])
        return true
      })
    },
    async release(token) {
      await query('DELETE FROM file_holds WHERE token = $1', [token])
    },
    async get(accountId, id) {
      const { rows } = await query<FileRow>(
        `SELECT ${FILE_COLUMNS} FROM files WHERE account_id = $1 AND id = $2`,
        [accountId, id],
      )
      return rows[0] ? toFile(rows[0]) : null
    },
    async list(accountId, { purpose, order, after, limit }) {
      const asc = order === 'asc'
      // `after` must be in the same (filtered) list, as with memory: otherwise the page is empty.
      const { rows } = await query<FileRow>(
        `SELECT ${FILE_COLUMNS} FROM files WHERE account_id = $1 AND ($2::text IS NULL OR purpose = $2)
           AND ($3::text IS NULL OR seq ${asc ? '>' : '<'} (SELECT seq FROM files
             WHERE account_id = $1 AND id = $3 AND ($2::text IS NULL OR purpose = $2)))
         ORDER BY seq ${asc ? 'ASC' : 'DESC'} LIMIT $4`,
        [accountId, purpose ?? null, after ?? null, limit + 1],
      )
      return { files: rows.slice(0, limit).map(toFile), hasMore: rows.length > limit }
    },
    async delete(accountId, id) {
      const { rows } = await query<FileRow>(
        `WITH d AS (DELETE FROM files WHERE account_id = $1 AND id = $2 RETURNING ${FILE_COLUMNS}),
           u AS (UPDATE file_accounts t SET files = t.files - 1, bytes = t.bytes - d.bytes
                 FROM d WHERE t.account_id = d.account_id)
         SELECT * FROM d`,
        [accountId, id],
      )
      return rows[0] ? toFile(rows[0]) : null
    },
    async usage(accountId) {
      const { rows } = await query<{ files: number; bytes: string }>(
        'SELECT files, bytes FROM file_accounts WHERE account_id = $1',
        [accountId],
      )
      return { files: rows[0]?.files ?? 0, bytes: Number(rows[0]?.bytes ?? 0) }
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const { rows } = await query<{ storage_key: string }>(
        'SELECT storage_key FROM files WHERE storage_key = ANY($1::text[])',
        [storageKeys],
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }
}

import { responseFromRow, type ResponseRow } from '../response-rows.ts'
import type { ResponseStore } from '../types.ts'
import type { SqliteHelpers } from './commit.ts'

// Stored Responses API answers (the interface: types.ts) in SQLite.

/** SQLite, with the store's statement helpers (a write joins its next group commit: commit.ts). */
export function createSqliteResponseStore({ get, run, tx, read }: SqliteHelpers): ResponseStore {
  return {
    async put(r) {
      await tx(() =>
        run(
          `INSERT INTO responses (id, account_id, created_at, input, response) VALUES (?, ?, ?, ?, ?)
           ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, created_at = excluded.created_at,
             input = excluded.input, response = excluded.response`,
          r.id,
          r.accountId,
          r.createdAt,
          JSON.stringify(r.input),
          JSON.stringify(r.response),
        ),
      )
    },
    async get(accountId, id) {
      const row = read(() =>
        get<ResponseRow>('SELECT * FROM responses WHERE id = ? AND account_id = ?', id, accountId),
      )
      return row ? responseFromRow(row) : null
    },
    async delete(accountId, id) {
      return (await tx(() => run('DELETE FROM responses WHERE id = ? AND account_id = ?', id, accountId))) > 0
    },
    async deleteBefore(cutoff) {
      await tx(() => run('DELETE FROM responses WHERE created_at < ?', cutoff))
    },
  }
}

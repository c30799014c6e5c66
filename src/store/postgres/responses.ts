import { responseFromRow, type ResponseRow } from '../response-rows.ts'
import type { ResponseStore } from '../types.ts'
import type { Query } from './pool.ts'

// Stored Responses API answers in PostgreSQL (the interface: types.ts): one table, read and written whole.

export function createPostgresResponseStore(query: Query): ResponseStore {
  return {
    async put(r) {
      await query(
        `INSERT INTO responses (id, account_id, created_at, input, response) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (id) DO UPDATE SET account_id = excluded.account_id, created_at = excluded.created_at,
           input = excluded.input, response = excluded.response`,
        [r.id, r.accountId, r.createdAt, JSON.stringify(r.input), JSON.stringify(r.response)],
      )
    },
    async get(accountId, id) {
      const { rows } = await query<ResponseRow>(
        'SELECT id, account_id, created_at, input::text AS input, response::text AS response FROM responses WHERE id = $1 AND account_id = $2',
        [id, accountId],
      )
      return rows[0] ? responseFromRow(rows[0]) : null
    },
    async delete(accountId, id) {
      const { rowCount } = await query('DELETE FROM responses WHERE id = $1 AND account_id = $2', [
        id,
        accountId,
      ])
      return (rowCount ?? 0) > 0
    },
    async deleteBefore(cutoff) {
      await query('DELETE FROM responses WHERE created_at < $1', [cutoff])
    },
  }
}

import type { SqliteHelpers } from './sqlite-tasks.ts'

// Stored Responses API answers (POST /v1/responses with `store`, the default): what a later request's
// `previous_response_id` continues, and what GET/DELETE /v1/responses/{id} read. The interface, and its
// memory and SQLite implementations (each small: one table, read and written whole; PostgreSQL's is
// postgres/responses.ts).
// Retention is the generation records' (`database.retentionDays`): the backends' sweep deletes both.

export interface StoredResponse {
  /** `resp_…` */
  id: string
  accountId: string
  /** Unix ms. */
  createdAt: number
  /** The conversation this answer followed, as Responses input items (earlier turns included). */
  input: unknown[]
  /** The Response object as it was answered. */
  response: Record<string, unknown>
}

export interface ResponseStore {
  /** Stores it; a second put of the same id replaces it. */
  put(r: StoredResponse): Promise<void>
  /** Null when there is none of that id for that account (another account's is null too). */
  get(accountId: string, id: string): Promise<StoredResponse | null>
  /** False when there was none of that id for that account. */
  delete(accountId: string, id: string): Promise<boolean>
  /** Deletes the ones created before `cutoff` (retention). */
  deleteBefore(cutoff: number): Promise<void>
}

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

export interface ResponseRow {
  id: string
  account_id: string
  created_at: number | string
  input: string
  response: string
}

export const fromRow = (row: ResponseRow): StoredResponse => ({
  id: row.id,
  accountId: row.account_id,
  createdAt: Number(row.created_at),
  input: JSON.parse(row.input) as unknown[],
  response: JSON.parse(row.response) as Record<string, unknown>,
})

/** SQLite, with the store's statement helpers (a write joins its next group commit: sqlite.ts). */
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
      return row ? fromRow(row) : null
    },
    async delete(accountId, id) {
      return (await tx(() => run('DELETE FROM responses WHERE id = ? AND account_id = ?', id, accountId))) > 0
    },
    async deleteBefore(cutoff) {
      await tx(() => run('DELETE FROM responses WHERE created_at < ?', cutoff))
    },
  }
}

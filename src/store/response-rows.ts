import type { StoredResponse } from './types.ts'

// A stored Responses API answer as both SQL backends keep it: one row, input and response as JSON text.

export interface ResponseRow {
  id: string
  account_id: string
  created_at: number | string
  input: string
  response: string
}

export const responseFromRow = (row: ResponseRow): StoredResponse => ({
  id: row.id,
  accountId: row.account_id,
  createdAt: Number(row.created_at),
  input: JSON.parse(row.input) as unknown[],
  response: JSON.parse(row.response) as Record<string, unknown>,
})

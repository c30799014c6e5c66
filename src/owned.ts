import type { GatewayError } from './errors.ts'

// decisions.md: an id that belongs to another account is answered exactly as an unknown one (404,
// never 403), so no one learns that it exists. Every lookup by a client-given id goes through here,
// whether the store already scoped the query to the account or fetched the record by id alone.

/** `record` when `accountId` owns it; otherwise (missing, or another account's) throws `notFound()`. */
export function owned<T extends { accountId: string }>(
  accountId: string,
  record: T | null | undefined,
  notFound: () => GatewayError,
): T {
  if (!record || record.accountId !== accountId) throw notFound()
  return record
}

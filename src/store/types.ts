// The state interfaces. Routes and services only see these; memory.ts implements them for one
// instance, and a Redis backend will implement the same ones for several instances sharing the load.

export interface Account {
  id: string
  name: string
  createdAt: number
}

export interface AccountStore {
  /** The account owning the API key whose SHA-256 is `keyHash`, or null. */
  findByKeyHash(keyHash: string): Promise<Account | null>
  get(id: string): Promise<Account | null>
  /** Creates the account, or leaves an existing one as it is. */
  upsert(account: Account): Promise<void>
  addKey(accountId: string, keyHash: string): Promise<void>
  removeKey(keyHash: string): Promise<boolean>
  list(): Promise<Account[]>
}

export interface Store {
  accounts: AccountStore
  /** Resolves when the backend can serve requests (readiness). */
  ping(): Promise<void>
  close(): Promise<void>
}

import type { FileStore } from './files.ts'
import type { Money } from '../billing/money.ts'

// The state interfaces. Routes and services only see these; memory.ts implements them for one
// instance, and a Redis backend will implement the same ones for several instances sharing the load.
// Every method is async and every read-modify-write is one method, so a backend can make it atomic.

export interface RateLimits {
  requestsPerMinute?: number
  tokensPerMinute?: number
}

export interface Account {
  id: string
  name: string
  createdAt: number
  /** Discount as parts per million of the upstream cost (750 000 = 75 % off). */
  discountPpm: number
  /** Per-model discounts (slug → ppm), taking precedence over `discountPpm`. */
  modelDiscountsPpm: Record<string, number>
  rateLimits: RateLimits
}

export interface ApiKeyRecord {
  id: string
  accountId: string
  /** SHA-256 of the key, lowercase hex; the key itself is never stored. */
  hash: string
  /** The first characters of the key, to tell keys apart in listings. */
  prefix: string
  createdAt: number
}

export interface AccountStore {
  /** The account owning the API key whose SHA-256 is `keyHash`, or null. */
  findByKeyHash(keyHash: string): Promise<Account | null>
  get(id: string): Promise<Account | null>
  /** Creates the account; false (and nothing changed) when the id exists. */
  create(account: Account): Promise<boolean>
  /** Applies a partial update; null when the account does not exist. */
  update(id: string, patch: Partial<Omit<Account, 'id' | 'createdAt'>>): Promise<Account | null>
  list(): Promise<Account[]>
  addKey(key: ApiKeyRecord): Promise<void>
  listKeys(accountId: string): Promise<ApiKeyRecord[]>
  /** Revokes one of the account's keys; false when it has no such key. */
  removeKey(accountId: string, keyId: string): Promise<boolean>
}

export interface Credits {
  totalCredits: Money
  totalUsage: Money
  /** Sum of the open (unexpired) reservations. */
  reserved: Money
}

export interface Reservation {
  id: string
  accountId: string
  amount: Money
}

export interface LedgerStore {
  /** Sets the starting credits of an account the ledger has never seen; no-op otherwise. */
  open(accountId: string, initialCredits: Money): Promise<void>
  credits(accountId: string, now: number): Promise<Credits>
  addCredits(accountId: string, amount: Money): Promise<Credits>
  /**
   * Atomically: refuse (null) when credits − usage − open reservations is not above zero; otherwise
   * hold min(upperBound, that available amount) until `now + ttlMs`.
   */
  reserve(
    accountId: string,
    id: string,
    upperBound: Money,
    now: number,
    ttlMs: number,
  ): Promise<Reservation | null>
  /** Atomically replaces the reservation by the actual cost (usage grows by `cost`). */
  settle(reservation: Reservation, cost: Money): Promise<void>
  release(reservation: Reservation): Promise<void>
}

export type CostSource = 'upstream' | 'estimate'

export interface GenerationUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details: {
    cached_tokens: number
    cache_write_tokens: number
    audio_tokens: number
    video_tokens: number
  }
  completion_tokens_details: { reasoning_tokens: number; image_tokens: number; audio_tokens: number }
}

export interface GenerationRecord {
  generationId: string
  accountId: string
  api: string
  model: string
  provider: string
  createdAt: number
  generationTimeMs: number
  latencyMs: number
  streamed: boolean
  finishReason: string | null
  cancelled: boolean
  costSource: CostSource
  usage: GenerationUsage
  upstreamCost: Money
  discountPpm: number
  discount: Money
  cost: Money
}

export interface GenerationPage {
  data: GenerationRecord[]
  /** Pass as `before` for the next (older) page; null on the last page. */
  nextCursor: string | null
}

export interface GenerationStore {
  put(record: GenerationRecord): Promise<void>
  get(generationId: string): Promise<GenerationRecord | null>
  /** The account's records, newest first. */
  listByAccount(accountId: string, options: { limit: number; before?: string }): Promise<GenerationPage>
}

export interface RateDecision {
  allowed: boolean
  limit: number
  remaining: number
  /** Unix ms when the window that decides the answer ends. */
  resetAt: number
}

export interface RateLimitStore {
  /** Sliding one-window counter: counts `amount` when it fits under `limit`, refuses otherwise. */
  consume(key: string, amount: number, limit: number, windowMs: number, now: number): Promise<RateDecision>
  /** Corrects an earlier estimate by `delta` (may be negative) in the current window. */
  adjust(key: string, delta: number, windowMs: number, now: number): Promise<void>
}

export interface Store {
  accounts: AccountStore
  files: FileStore
  ledger: LedgerStore
  generations: GenerationStore
  rateLimits: RateLimitStore
  /** Resolves when the backend can serve requests (readiness). */
  ping(): Promise<void>
  close(): Promise<void>
}

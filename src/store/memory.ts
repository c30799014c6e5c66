import { createMemoryFileStore } from './files.ts'
import type {
  Account,
  AccountStore,
  ApiKeyRecord,
  GenerationRecord,
  GenerationStore,
  LedgerStore,
  RateLimitStore,
  Reservation,
  Store,
} from './types.ts'

// One process's state. Each method runs to completion without awaiting in between, which is what
// makes every read-modify-write atomic here; the Redis backend gets the same from scripts.

export function createMemoryAccountStore(): AccountStore {
  const accounts = new Map<string, Account>()
  const keys = new Map<string, ApiKeyRecord>() // by hash
  const copy = (a: Account): Account => ({
    ...a,
    modelDiscountsPpm: { ...a.modelDiscountsPpm },
    rateLimits: { ...a.rateLimits },
  })
  return {
    async findByKeyHash(keyHash) {
      const key = keys.get(keyHash)
      const account = key && accounts.get(key.accountId)
      return account ? copy(account) : null
    },
    async get(id) {
      const a = accounts.get(id)
      return a ? copy(a) : null
    },
    async create(account) {
      if (accounts.has(account.id)) return false
      accounts.set(account.id, copy(account))
      return true
    },
    async update(id, patch) {
      const a = accounts.get(id)
      if (!a) return null
      const next = copy({ ...a, ...patch })
      accounts.set(id, next)
      return copy(next)
    },
    async list() {
      return [...accounts.values()]
        .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
        .map(copy)
    },
    async addKey(key) {
      if (!accounts.has(key.accountId)) throw new Error(`unknown account ${key.accountId}`)
      keys.set(key.hash, { ...key })
    },
    async listKeys(accountId) {
      return [...keys.values()]
        .filter((k) => k.accountId === accountId)
        .sort((a, b) => a.createdAt - b.createdAt)
    },
    async removeKey(accountId, keyId) {
      for (const [hash, k] of keys) {
        if (k.id === keyId && k.accountId === accountId) return keys.delete(hash)
      }
      return false
    },
  }
}

interface LedgerEntry {
  credits: bigint
  usage: bigint
  reservations: Map<string, { amount: bigint; expiresAt: number }>
}

export function createMemoryLedgerStore(): LedgerStore {
  const entries = new Map<string, LedgerEntry>()
  const entry = (accountId: string): LedgerEntry => {
    let e = entries.get(accountId)
    if (!e) {
      e = { credits: 0n, usage: 0n, reservations: new Map() }
      entries.set(accountId, e)
    }
    return e
  }
  // Expired reservations (their request crashed or hung) stop counting against the balance.
  const openReserved = (e: LedgerEntry, now: number): bigint => {
    let sum = 0n
    for (const [id, r] of e.reservations) {
      if (r.expiresAt <= now) e.reservations.delete(id)
      else sum += r.amount
    }
    return sum
  }
  return {
    async open(accountId, initialCredits) {
      if (!entries.has(accountId)) entry(accountId).credits = initialCredits
    },
    async credits(accountId, now) {
      const e = entry(accountId)
      return { totalCredits: e.credits, totalUsage: e.usage, reserved: openReserved(e, now) }
    },
    async addCredits(accountId, amount) {
      const e = entry(accountId)
      e.credits += amount
      return { totalCredits: e.credits, totalUsage: e.usage, reserved: openReserved(e, Date.now()) }
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      const e = entry(accountId)
      const available = e.credits - e.usage - openReserved(e, now)
      if (available <= 0n) return null
      const amount = upperBound < available ? upperBound : available
      e.reservations.set(id, { amount, expiresAt: now + ttlMs })
      return { id, accountId, amount }
    },
    async settle(reservation: Reservation, cost) {
      const e = entry(reservation.accountId)
      e.reservations.delete(reservation.id)
      e.usage += cost
    },
    async release(reservation) {
      entry(reservation.accountId).reservations.delete(reservation.id)
    },
  }
}

/** Keeps at most `maxPerAccount` records per account in memory, dropping the oldest. */
export function createMemoryGenerationStore(maxPerAccount = 50_000): GenerationStore {
  const records = new Map<string, GenerationRecord>()
  const byAccount = new Map<string, string[]>() // oldest first
  return {
    async put(record) {
      if (records.has(record.generationId))
        throw new Error(`generation ${record.generationId} already recorded`)
      records.set(record.generationId, record)
      let ids = byAccount.get(record.accountId)
      if (!ids) byAccount.set(record.accountId, (ids = []))
      ids.push(record.generationId)
      if (ids.length > maxPerAccount) records.delete(ids.shift() as string)
    },
    async get(id) {
      return records.get(id) ?? null
    },
    async listByAccount(accountId, { limit, before }) {
      const ids = byAccount.get(accountId) ?? []
      let end = ids.length
      if (before !== undefined) {
        const at = ids.lastIndexOf(before)
        end = at === -1 ? 0 : at
      }
      const start = Math.max(0, end - limit)
      const data = ids
        .slice(start, end)
        .reverse()
        .map((id) => records.get(id) as GenerationRecord)
      return { data, nextCursor: start > 0 && data.length > 0 ? (data.at(-1)?.generationId ?? null) : null }
    },
  }
}

export function createMemoryRateLimitStore(): RateLimitStore {
  const windows = new Map<string, { start: number; current: number; previous: number }>()
  const windowOf = (key: string, windowMs: number, now: number) => {
    const start = now - (now % windowMs)
    let w = windows.get(key)
    if (!w) {
      w = { start, current: 0, previous: 0 }
      windows.set(key, w)
    } else if (w.start !== start) {
      w.previous = start - w.start === windowMs ? w.current : 0
      w.current = 0
      w.start = start
    }
    return w
  }
  return {
    async consume(key, amount, limit, windowMs, now) {
      const w = windowOf(key, windowMs, now)
      // Sliding estimate: the previous window weighs as much as it still overlaps the last windowMs.
      const weight = 1 - (now - w.start) / windowMs
      const used = Math.ceil(w.previous * weight) + w.current
      const allowed = used + amount <= limit
      if (allowed) w.current += amount
      return {
        allowed,
        limit,
        remaining: Math.max(0, limit - used - (allowed ? amount : 0)),
        resetAt: w.start + windowMs,
      }
    },
    async adjust(key, delta, windowMs, now) {
      const w = windowOf(key, windowMs, now)
      w.current = Math.max(0, w.current + delta)
    },
  }
}

export function createMemoryStore(): Store {
  return {
    accounts: createMemoryAccountStore(),
    files: createMemoryFileStore(),
    ledger: createMemoryLedgerStore(),
    generations: createMemoryGenerationStore(),
    rateLimits: createMemoryRateLimitStore(),
    async ping() {},
    async close() {},
  }
}

import { copyKey } from './copies.ts'
import { composeAdmission } from './admission.ts'
import { capCharge, chargeCeiling } from '../billing/overage.ts'
import { createMemoryFileStore } from './files.ts'
import { createMemoryTaskStores } from './tasks-memory.ts'
import { createMemoryResponseStore } from './responses.ts'
import { consumeWindows, rollWindow } from './rate-windows.ts'
import { byDayThenModel, DAY_MS } from './activity.ts'
import {
  chargeCounters,
  keyRoom,
  noCounters as noCountersFor,
  normalizeKey,
  usageAt,
  type KeyCounters,
} from './key-usage.ts'
import type {
  Account,
  AccountStore,
  ActivityRow,
  ApiKeyRecord,
  KeyLookup,
  GenerationRecord,
  GenerationStore,
  LedgerStore,
  RateLimitStore,
  Store,
} from './types.ts'

// One process's state. Each method runs to completion without awaiting in between, which is what
// makes every read-modify-write atomic here (a SQL backend gets the same from one transaction).
// Nothing handed in or out is the store's own object: inputs are copied in, results copied out.

// Copies by hand: structuredClone costs several microseconds on every authenticated request.
// An overdraft of 0 is no overdraft field, as the SQL stores read it back.
const copyAccount = ({ overdraft, notices, ...a }: Account): Account => ({
  ...a,
  modelDiscountsPpm: { ...a.modelDiscountsPpm },
  rateLimits: { ...a.rateLimits },
  ...(overdraft ? { overdraft } : {}),
  ...(notices ? { notices: { ...notices } } : {}),
})

const copyRecord = (r: GenerationRecord): GenerationRecord => ({
  ...r,
  usage: {
    ...r.usage,
    prompt_tokens_details: { ...r.usage.prompt_tokens_details },
    completion_tokens_details: { ...r.usage.completion_tokens_details },
  },
  ...(r.unbilledOverage ? { unbilledOverage: { ...r.unbilledOverage } } : {}),
})

export interface MemoryStoreOptions {
  /** Rate limits from another backend; the group of accounts, ledger, generations and files stays here. */
  rateLimits?: RateLimitStore
  /**
   * Generation records kept per account, the oldest dropped beyond it (default 50 000). A settle is
   * recognised as a repeat for as long as the store lives, whether or not its record is still kept:
   * the settled ids are kept apart from the records (some 80 bytes each, a test and trial backend's
   * price for the interface's "exactly once").
   */
  maxGenerationsPerAccount?: number
  /** Generation records older than this many days are deleted by `sweep`; usage totals stay. */
  retentionDays?: number
}

export function createMemoryStore(options: MemoryStoreOptions = {}): Store {
  const { accounts, ledger, generations, dropRecordsBefore } = createMemoryLedgerGroup(
    options.maxGenerationsPerAccount,
  )
  const rateLimits = options.rateLimits ?? createMemoryRateLimitStore()
  const applied = new Map<string, string>()
  const responses = createMemoryResponseStore()
  return {
    responses,
    accounts,
    files: createMemoryFileStore(),
    ...createMemoryTaskStores(),
    ledger,
    generations,
    rateLimits,
    admission: composeAdmission(ledger, rateLimits),
    appliedConfig: {
      async get(accountId) {
        return applied.get(accountId) ?? null
      },
      async set(accountId, snapshot) {
        applied.set(accountId, snapshot)
      },
    },
    async ping() {},
    async sweep(now) {
      // Reading credits drops the account's expired reservations.
      for (const a of await accounts.list()) await ledger.credits(a.id, now)
      await rateLimits.sweep(now)
      if (options.retentionDays !== undefined) {
        dropRecordsBefore(now - options.retentionDays * 86_400_000)
        await responses.deleteBefore(now - options.retentionDays * 86_400_000)
      }
    },
    async close() {},
  }
}

interface AccountState {
  account: Account
  credits: bigint
  usage: bigint
  reservations: Map<string, { amount: bigint; expiresAt: number; keyHash?: string }>
  /** Generation ids, oldest settled first. */
  generations: string[]
}

/** Accounts, their ledger and generation records over one state, so create and settle are one step. */
function createMemoryLedgerGroup(maxPerAccount = 50_000): {
  accounts: AccountStore
  ledger: LedgerStore
  generations: GenerationStore
  /** Retention: deletes the records created before `cutoff` (usage totals stay). */
  dropRecordsBefore(cutoff: number): void
} {
  const dropBatch = Math.max(1, Math.floor(maxPerAccount / 50))
  const states = new Map<string, AccountState>()
  const keys = new Map<string, ApiKeyRecord>() // by hash
  const counters = new Map<string, KeyCounters>() // by key hash
  const records = new Map<string, GenerationRecord>()
  /**
   * Every generation id ever settled: what makes a repeat a no-op after its record left the window
   * or retention (accounts are never deleted, so this is "for as long as the account exists").
   */
  const settled = new Set<string>()

  const mustGet = (accountId: string): AccountState => {
    const s = states.get(accountId)
    if (!s) throw new Error(`unknown account ${accountId}`)
    return s
  }
  // Expired reservations (their request crashed or hung) stop counting against the balance.
  const openReserved = (s: AccountState, now: number): bigint => {
    let sum = 0n
    for (const [id, r] of s.reservations) {
      if (r.expiresAt <= now) s.reservations.delete(id)
      else sum += r.amount
    }
    return sum
  }
  const keyHeld = (s: AccountState, keyHash: string, now: number): bigint => {
    let sum = 0n
    for (const r of s.reservations.values()) if (r.keyHash === keyHash && r.expiresAt > now) sum += r.amount
    return sum
  }
  const creditsOf = (s: AccountState, now: number) => ({
    totalCredits: s.credits,
    totalUsage: s.usage,
    reserved: openReserved(s, now),
  })

  const findKey = (keyHash: string): KeyLookup | null => {
    const key = keys.get(keyHash)
    const s = key && states.get(key.accountId)
    return s ? { account: copyAccount(s.account), key: copyKey(key) } : null
  }
  const accounts: AccountStore = {
    async findByKeyHash(keyHash) {
      return findKey(keyHash)?.account ?? null
    },
    async findKey(keyHash) {
      return findKey(keyHash)
    },
    async getKey(accountId, keyHash) {
      const k = keys.get(keyHash)
      return k && k.accountId === accountId ? copyKey(k) : null
    },
    async updateKey(accountId, keyHash, patch) {
      const k = keys.get(keyHash)
      if (!k || k.accountId !== accountId) return null
      const next = normalizeKey({ ...k, ...patch })
      keys.set(keyHash, next)
      return copyKey(next)
    },
    async get(id) {
      const s = states.get(id)
      return s ? copyAccount(s.account) : null
    },
    async create(account, initialCredits) {
      if (states.has(account.id)) return false
      states.set(account.id, {
        account: copyAccount(account),
        credits: initialCredits,
        usage: 0n,
        reservations: new Map(),
        generations: [],
      })
      return true
    },
    async update(id, patch) {
      const s = states.get(id)
      if (!s) return null
      s.account = copyAccount({ ...s.account, ...patch, id, createdAt: s.account.createdAt })
      return copyAccount(s.account)
    },
    async list() {
      return [...states.values()]
        .map((s) => s.account)
        .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
        .map(copyAccount)
    },
    async addKey(key) {
      mustGet(key.accountId)
      keys.set(key.hash, normalizeKey(key))
    },
    async listKeys(accountId) {
      return [...keys.values()]
        .filter((k) => k.accountId === accountId)
        .sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id))
        .map(copyKey)
    },
    async removeKey(accountId, keyId) {
      for (const [hash, k] of keys) {
        if (k.id === keyId && k.accountId === accountId) return keys.delete(hash)
      }
      return false
    },
  }

  const ledger: LedgerStore = {
    async credits(accountId, now) {
      const s = states.get(accountId)
      return s ? creditsOf(s, now) : { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
    },
    async addCredits(accountId, amount, now) {
      const s = mustGet(accountId)
      s.credits += amount
      return creditsOf(s, now)
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      const s = states.get(accountId)
      if (!s) return null
      const available = s.credits - s.usage - openReserved(s, now)
      if (available <= 0n) return null
      const amount = upperBound < available ? upperBound : available
      const expiresAt = now + ttlMs
      s.reservations.set(id, { amount, expiresAt })
      return { id, accountId, amount, expiresAt }
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      const s = states.get(accountId)
      if (!s) return { reservation: null, keyLimited: false }
      const available = s.credits - s.usage - openReserved(s, now)
      if (available <= 0n) return { reservation: null, keyLimited: false }
      const room = keyRoom(counters.get(key.hash), key, keyHeld(s, key.hash, now), now)
      if (room !== null && room <= 0n) return { reservation: null, keyLimited: true }
      let amount = upperBound < available ? upperBound : available
      if (room !== null && room < amount) amount = room
      const expiresAt = now + ttlMs
      s.reservations.set(id, { amount, expiresAt, keyHash: key.hash })
      return { reservation: { id, accountId, amount, expiresAt }, keyLimited: false }
    },
    async keyUsage(accountId, keyHashes, now) {
      const s = states.get(accountId)
      return keyHashes.map((h) => usageAt(counters.get(h), s ? keyHeld(s, h, now) : 0n, now))
    },
    async renew(ref, now, ttlMs) {
      const r = states.get(ref.accountId)?.reservations.get(ref.id)
      if (!r || r.expiresAt <= now) return false
      r.expiresAt = now + ttlMs
      return true
    },
    async settle(ref, input, limit) {
      if (input.accountId !== ref.accountId) {
        throw new Error(`generation ${input.generationId} settled against another account's reservation`)
      }
      const s = mustGet(ref.accountId)
      if (settled.has(input.generationId)) return null
      const now = limit?.now ?? input.createdAt + input.generationTimeMs
      const stored = s.reservations.get(ref.id)
      s.reservations.delete(ref.id)
      const open = stored && stored.expiresAt > now ? stored : undefined
      const held = limit?.held ?? open?.amount
      const keyHash = input.keyHash ?? stored?.keyHash
      const charged =
        open && held !== undefined && input.cost <= held
          ? input
          : capCharge(
              input,
              chargeCeiling({
                held,
                overdraft: s.account.overdraft ?? 0n,
                free: s.credits - s.usage - openReserved(s, now),
              }),
            )
      const record = keyHash === undefined || charged.keyHash === keyHash ? charged : { ...charged, keyHash }
      s.usage += record.cost
      if (keyHash !== undefined) {
        counters.set(
          keyHash,
          chargeCounters(counters.get(keyHash) ?? noCountersFor(), record.createdAt, record.cost),
        )
      }
      records.set(record.generationId, copyRecord(record))
      settled.add(record.generationId)
      s.generations.push(record.generationId)
      // Dropped in batches (a fiftieth of the cap): shifting one id off a 50 000-long array on every
      // request is a copy of it.
      if (s.generations.length - maxPerAccount >= dropBatch) {
        for (const id of s.generations.splice(0, s.generations.length - maxPerAccount)) records.delete(id)
      }
      return copyRecord(record)
    },
    async release(ref) {
      states.get(ref.accountId)?.reservations.delete(ref.id)
    },
  }

  const generations: GenerationStore = {
    async get(id) {
      const r = records.get(id)
      return r ? copyRecord(r) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      let ids = states.get(accountId)?.generations ?? []
      if (model !== undefined) ids = ids.filter((id) => records.get(id)?.model === model)
      if (keyHash !== undefined) ids = ids.filter((id) => records.get(id)?.keyHash === keyHash)
      let end = ids.length
      if (before !== undefined) {
        const at = ids.lastIndexOf(before)
        end = at === -1 ? 0 : at
      }
      const start = Math.max(0, end - limit)
      const data = ids
        .slice(start, end)
        .reverse()
        .map((id) => copyRecord(records.get(id) as GenerationRecord))
      return { data, nextCursor: start > 0 && data.length > 0 ? (data.at(-1)?.generationId ?? null) : null }
    },
    async activity(accountId, since, until) {
      const rows = new Map<string, ActivityRow>()
      for (const id of states.get(accountId)?.generations ?? []) {
        const r = records.get(id)
        if (!r || r.createdAt < since || r.createdAt >= until) continue
        const day = r.createdAt - (r.createdAt % DAY_MS)
        const key = `${day}\0${r.model}`
        let row = rows.get(key)
        if (!row) {
          row = {
            day,
            model: r.model,
            requests: 0,
            promptTokens: 0,
            completionTokens: 0,
            upstreamCost: 0n,
            cost: 0n,
          }
          rows.set(key, row)
        }
        row.requests++
        row.promptTokens += r.usage.prompt_tokens
        row.completionTokens += r.usage.completion_tokens
        row.upstreamCost += r.upstreamCost
        row.cost += r.cost
      }
      return [...rows.values()].sort(byDayThenModel)
    },
  }

  const dropRecordsBefore = (cutoff: number): void => {
    for (const s of states.values()) {
      s.generations = s.generations.filter((id) => {
        const r = records.get(id)
        if (r && r.createdAt >= cutoff) return true
        records.delete(id)
        return false
      })
    }
  }

  return { accounts, ledger, generations, dropRecordsBefore }
}

export function createMemoryRateLimitStore(): RateLimitStore {
  const windows = new Map<string, { start: number; current: number; previous: number; windowMs: number }>()
  const windowOf = (key: string, windowMs: number, now: number) => {
    let w = windows.get(key)
    if (!w) {
      w = { start: now - (now % windowMs), current: 0, previous: 0, windowMs }
      windows.set(key, w)
    } else rollWindow(w, windowMs, now)
    return w
  }
  return {
    async sweep(now) {
      for (const [key, w] of windows) if (now - w.start >= 2 * w.windowMs) windows.delete(key)
    },
    async consume(checks, windowMs, now) {
      return consumeWindows(checks, (key) => windowOf(key, windowMs, now), windowMs, now)
    },
    async adjust(key, delta, windowMs, now) {
      const w = windowOf(key, windowMs, now)
      w.current = Math.max(0, w.current + delta)
    },
  }
}

import { composeAdmission } from '../admission.ts'
import type { RateLimitStore, Store } from '../types.ts'
import { createMemoryAccountStore } from './accounts.ts'
import { createMemoryFileStore } from './files.ts'
import { createMemoryGenerationStore, dropRecordsBefore } from './generations.ts'
import { createMemoryLedgerStore } from './ledger.ts'
import { createMemoryRateLimitStore } from './rate-limits.ts'
import { createMemoryResponseStore } from './responses.ts'
import { createLedgerState } from './state.ts'
import { createMemoryTaskStores } from './tasks.ts'

// One process's state: accounts, keys, ledger and generation records over one state (state.ts), so
// create and settle are one step; rate limits, files, predictions and responses beside it.

export { createMemoryRateLimitStore }

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
  const state = createLedgerState()
  const accounts = createMemoryAccountStore(state)
  const ledger = createMemoryLedgerStore(state, options.maxGenerationsPerAccount ?? 50_000)
  const rateLimits = options.rateLimits ?? createMemoryRateLimitStore()
  const applied = new Map<string, string>()
  const responses = createMemoryResponseStore()
  return {
    responses,
    accounts,
    files: createMemoryFileStore(),
    ...createMemoryTaskStores(),
    ledger,
    generations: createMemoryGenerationStore(state),
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
        dropRecordsBefore(state, now - options.retentionDays * 86_400_000)
        await responses.deleteBefore(now - options.retentionDays * 86_400_000)
      }
    },
    async close() {},
  }
}

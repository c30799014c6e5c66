import pg from 'pg'
import type { KeyLookup } from '../types.ts'
import type { Logger } from '../../logger.ts'

// The key lookups this instance remembers, and the LISTEN connection that makes every instance forget
// them when accounts or keys change anywhere (keys.ts reads and fills it; accounts.ts and keys.ts
// clear it around their own changes).

/** Accounts of API keys kept in memory for the lookup every request makes, at most. */
export const KEY_CACHE = 10_000
/**
 * How long a cached lookup is used without asking the database again: the bound on a key revoked
 * (or an account changed) elsewhere still working here should the listening connection die silently.
 */
export const KEY_CACHE_MAX_AGE_MS = 5_000

/**
 * The accounts of API keys this instance looked up. Used only while the listening connection is up
 * (`live`), so that a change made by any instance clears it; this instance's own changes clear it at
 * once. `epoch` moves at every clearing: a lookup sent before one is not cached.
 */
export interface KeyCache {
  live: boolean
  epoch: number
  entries: Map<string, { found: KeyLookup; at: number }>
  forget(): void
}

export function createKeyCache(): KeyCache {
  const cache: KeyCache = {
    live: false,
    epoch: 0,
    entries: new Map(),
    forget() {
      cache.entries.clear()
      cache.epoch++
    },
  }
  return cache
}

/**
 * One connection outside the pool listening for `junction_accounts` (sent by triggers of migration
 * 13 when accounts or keys change): every notification clears the key cache. While the connection is
 * down the cache is not used, and it is opened again 1 s later, then 2 s, … up to 30 s.
 */
export function listenForAccountChanges(
  url: string,
  cache: KeyCache,
  options: { log?: Logger; onAccountsChanged?: () => void },
): { close(): Promise<void> } {
  let closed = false
  let current: pg.Client | null = null
  let retryMs = 1_000
  let timer: NodeJS.Timeout | undefined
  const changed = (): void => {
    cache.forget()
    options.onAccountsChanged?.()
  }
  const lost = (client: pg.Client): void => {
    if (current !== client) return
    current = null
    cache.live = false
    cache.forget()
    client.end().catch(() => {})
    if (closed) return
    timer = setTimeout(() => void open(), retryMs)
    timer.unref()
    retryMs = Math.min(retryMs * 2, 30_000)
  }
  const open = async (): Promise<void> => {
    const client = new pg.Client({
      connectionString: url,
      connectionTimeoutMillis: 5_000,
      keepAlive: true,
      application_name: 'junction-listen',
    })
    current = client
    client.on('notification', changed)
    client.on('error', (err) => {
      options.log?.debug({ err: { message: err.message } }, 'postgres listening connection error')
      lost(client)
    })
    client.on('end', () => lost(client))
    try {
      await client.connect()
      await client.query('LISTEN junction_accounts')
    } catch {
      lost(client)
      return
    }
    if (current !== client) return
    retryMs = 1_000
    cache.live = true
    changed()
  }
  void open()
  return {
    async close() {
      closed = true
      clearTimeout(timer)
      const client = current
      current = null
      cache.live = false
      await client?.end().catch(() => {})
    },
  }
}

/** This instance's own change: forgotten before the caller hears back (the others by notification). */
export async function changing<T>(cache: KeyCache, p: Promise<T>): Promise<T> {
  cache.forget()
  try {
    return await p
  } finally {
    cache.forget()
  }
}

import { copyLookup } from './copies.ts'
import { byDayThenModel, DAY_MS } from './activity.ts'
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import type { PoolClient, QueryResult, QueryResultRow } from 'pg'
import { capCharge } from '../billing/overage.ts'
import { GatewayError } from '../errors.ts'
import type { Money } from '../billing/money.ts'
import type { Logger } from '../logger.ts'
import type {
  FilePurpose,
  FileStore,
  StoredFile,
  Account,
  KeyHold,
  KeyLookup,
  AccountStore,
  ApiKeyRecord,
  Credits,
  GenerationRecord,
  GenerationStore,
  LedgerStore,
  RateCheck,
  RateDecision,
  AdmissionStore,
  AdmitOutcome,
  BeforeBodyOutcome,
  RateLimitStore,
  Reservation,
  ReservationRef,
  SettleLimit,
  Store,
} from './types.ts'
import { migrations } from './postgres-migrations.ts'
import { redactUrl } from './database-url.ts'
import { postgresCondition, toStoreError as toSqlStoreError } from './sql-errors.ts'
import { createBatcher, type BatcherOptions } from './postgres-batch.ts'
import { createPostgresTaskStores } from './postgres-tasks.ts'
import { createPostgresResponseStore } from './postgres-responses.ts'
import {
  decodeKeySettings,
  decodeNotices,
  encodeKeySettings,
  encodeNotices,
  usageAt,
  windowStart,
  windowStarts,
} from './key-usage.ts'

// The PostgreSQL backend: every instance of the gateway pointed at one database behaves as one
// gateway. Every read-modify-write is one statement, or one transaction that first locks the row
// that decides (the account's ledger row, its file totals, the rate windows in key order), so two
// processes never both spend the same credit. Money travels as decimal strings (NUMERIC(40,0)
// picodollars), never as a JavaScript number.
//
// Failures of the database itself become `store_unavailable` (503) by the rule both SQL backends share
// (sql-errors.ts); the pool reconnects by itself when the database is back. Any other database error
// is a bug and is thrown as it is.

const { Pool, DatabaseError } = pg

/** pg_advisory_xact_lock key taken by the migration transaction (an arbitrary constant of Junction's). */
const MIGRATION_LOCK = '7310593858302427730'

export interface PostgresStoreOptions {
  log?: Logger
  /** Connections per gateway process (default 10). */
  poolSize?: number
  /** Generation records older than this are deleted by `sweep` (the ledger's totals stay). */
  retentionDays?: number
  /**
   * Group commit (postgres-batch.ts) of key lookups, credit reads, reserves, settles and rate-limit
   * consumes: batches of one kind on their way at once (default 2) and most calls in one (default 256);
   * false sends every call on its own.
   */
  batch?: { maxInFlight?: number; maxBatch?: number } | false
  /** Told every statement sent (its kind: the prepared statement's name, else `query`), for counters. */
  onRoundTrip?: (kind: string) => void
  /**
   * Told when this instance has forgotten its cached key lookups because accounts or keys changed in
   * any instance (a notification arrived), or its listening connection was (re)opened (tests).
   */
  onAccountsChanged?: () => void
  /**
   * How long an account seen with credits is answered so before a request's body without asking the
   * database (default 1000 ms; 0: always asked).
   */
  creditsKnownMs?: number
}

/** A statement with a `name` is prepared once per connection and then sent as name and values only. */
type Query = <R extends QueryResultRow>(
  text: string,
  values?: unknown[],
  name?: string,
) => Promise<QueryResult<R>>

/** A driver failure by sql-errors.ts's rule (socket errors and pg's own have no SQLSTATE: unreachable). */
export function toStoreError(err: unknown): unknown {
  return toSqlStoreError(err, postgresCondition(err instanceof DatabaseError ? err.code : undefined))
}

const money = (v: bigint): string => v.toString()
const toMoney = (v: unknown): bigint => BigInt(String(v))

export async function createPostgresStore(url: string, options: PostgresStoreOptions): Promise<Store> {
  const { log } = options
  const pool = new Pool({
    connectionString: url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    // A connection that stops answering (a partition rather than a refusal) fails the call instead of
    // hanging it; the pool then discards that connection.
    query_timeout: 15_000,
    keepAlive: true,
    application_name: 'junction',
  })
  // A connection that dies while idle in the pool emits 'error' on the pool, and one that dies while
  // checked out emits it on the client: unhandled, either would end the process.
  pool.on('error', (err) => log?.warn({ err: { message: err.message } }, 'postgres connection lost'))
  pool.on('connect', (client) => {
    client.on('error', (err) => log?.debug({ err: { message: err.message } }, 'postgres connection error'))
  })

  const statements = new Map<string, number>()
  const run = async <R extends QueryResultRow>(
    runner: pg.Pool | PoolClient,
    text: string,
    values?: unknown[],
    name?: string,
  ): Promise<QueryResult<R>> => {
    const kind = name ?? 'query'
    statements.set(kind, (statements.get(kind) ?? 0) + 1)
    options.onRoundTrip?.(kind)
    try {
      return await (name === undefined
        ? runner.query<R>(text, values)
        : runner.query<R>({ name, text, ...(values ? { values } : {}) }))
    } catch (err) {
      throw toStoreError(err)
    }
  }
  const query: Query = (text, values, name) => run(pool, text, values, name)

  /** Runs `fn` in one transaction; on any error the connection is discarded, which rolls it back. */
  const transaction = async <T>(fn: (q: Query) => Promise<T>): Promise<T> => {
    let client: PoolClient
    try {
      client = await pool.connect()
    } catch (err) {
      throw toStoreError(err)
    }
    const q: Query = (text, values, name) => run(client, text, values, name)
    try {
      await q('BEGIN')
      const result = await fn(q)
      await q('COMMIT')
      client.release()
      return result
    } catch (err) {
      client.release(true)
      throw err
    }
  }

  try {
    const applied = await transaction(async (q) => {
      // Two instances starting at once: the second waits here and then finds nothing left to apply.
      await q('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK])
      await q(`CREATE TABLE IF NOT EXISTS schema_version (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
      const { rows } = await q<{ v: number }>('SELECT coalesce(max(version), 0) AS v FROM schema_version')
      const current = rows[0]!.v
      const known = migrations.at(-1)?.version ?? 0
      if (current > known) {
        log?.warn({ current, known }, 'the database schema is newer than this gateway knows')
      }
      const pending = migrations.filter((m) => m.version > current)
      for (const m of pending) {
        await q(m.sql)
        await q('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [m.version, m.name])
      }
      return pending.map((m) => m.version)
    })
    log?.info({ database: redactUrl(url), applied }, 'postgres store ready')
  } catch (err) {
    await pool.end().catch(() => {})
    throw err
  }

  const batch = batchOptions(options.batch)
  const rateLimits = createRateLimits(query, batch)
  const known = createCreditsKnown(options.creditsKnownMs ?? 1_000)
  const ledger = createLedger(query, batch, known)
  const keyCache = createKeyCache()
  const listener = listenForAccountChanges(url, keyCache, options)
  const retentionMs = options.retentionDays === undefined ? undefined : options.retentionDays * 86_400_000
  return {
    accounts: createAccounts(query, transaction, batch, keyCache),
    ledger,
    generations: createGenerations(query),
    files: createFiles(query, transaction),
    rateLimits,
    admission: createAdmission(query, batch, known),
    ...createPostgresTaskStores(query, transaction),
    responses: createPostgresResponseStore(query),
    async ping() {
      await query('SELECT 1')
    },
    statements: () => statements,
    appliedConfig: {
      async get(accountId) {
        const { rows } = await query<{ snapshot: string }>(
          'SELECT snapshot FROM config_applied WHERE account_id = $1',
          [accountId],
        )
        return rows[0]?.snapshot ?? null
      },
      async set(accountId, snapshot) {
        await query(
          `INSERT INTO config_applied (account_id, snapshot) VALUES ($1, $2)
           ON CONFLICT (account_id) DO UPDATE SET snapshot = excluded.snapshot`,
          [accountId, snapshot],
        )
      },
    },
    async sweep(now) {
      // Each account's ledger row is locked first, in account order, as every batch does (the triggers
      // of migration 13 update it when its holds go): a sweep never deadlocks with a batch.
      await transaction(async (q) => {
        const { rows } = await q<{ account_id: string }>(
          `SELECT account_id FROM ledger WHERE account_id IN (
             SELECT account_id FROM reservations WHERE expires_at <= $1)
           ORDER BY account_id FOR NO KEY UPDATE`,
          [now],
        )
        if (rows.length === 0) return
        await q('DELETE FROM reservations WHERE expires_at <= $1 AND account_id = ANY ($2::text[])', [
          now,
          rows.map((r) => r.account_id),
        ])
      })
      await query('DELETE FROM file_holds WHERE expires_at <= $1', [now])
      await rateLimits.sweep(now)
      if (retentionMs !== undefined) {
        await query('DELETE FROM generations WHERE created_at < $1', [now - retentionMs])
        await query('DELETE FROM responses WHERE created_at < $1', [now - retentionMs])
      }
    },
    async close() {
      await listener.close()
      await pool.end()
    },
  }
}

type Transaction = <T>(fn: (q: Query) => Promise<T>) => Promise<T>

/** Group commit settings; null: every call on its own. */
type Batch = BatcherOptions | null

function batchOptions(o: PostgresStoreOptions['batch']): Batch {
  if (o === false) return null
  return { maxInFlight: o?.maxInFlight ?? 2, maxBatch: o?.maxBatch ?? 256 }
}

/**
 * `one` for a call alone, `many` for a batch of them (postgres-batch.ts). When `many` fails with
 * anything but the database being unavailable (an item it refuses, such as an unknown account), its
 * transaction committed nothing and each item is sent again on its own, so only that item fails.
 */
function batched<I, O>(
  batch: Batch,
  one: (item: I) => Promise<O>,
  many: (items: I[]) => Promise<O[]>,
): (item: I) => Promise<O> {
  if (batch === null) return one
  return createBatcher<I, O>(async (items) => {
    if (items.length === 1) return Promise.allSettled([one(items[0]!)])
    try {
      return (await many(items)).map((value): PromiseFulfilledResult<O> => ({ status: 'fulfilled', value }))
    } catch (err) {
      if (err instanceof GatewayError) throw err
      return Promise.allSettled(items.map(one))
    }
  }, batch)
}

/** A foreign key to accounts failed: the caller named an account that does not exist. */
const isUnknownAccount = (err: unknown): boolean => err instanceof DatabaseError && err.code === '23503'

interface AccountRow {
  id: string
  name: string
  created_at: string
  discount_ppm: number
  model_discounts_ppm: Record<string, number>
  rate_limits: Account['rateLimits']
  overdraft: string
  notices: string
}

const ACCOUNT_COLUMNS =
  'a.id, a.name, a.created_at, a.discount_ppm, a.model_discounts_ppm, a.rate_limits, a.overdraft, a.notices'

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  createdAt: Number(r.created_at),
  discountPpm: r.discount_ppm,
  modelDiscountsPpm: r.model_discounts_ppm,
  rateLimits: r.rate_limits,
  ...(toMoney(r.overdraft) !== 0n ? { overdraft: toMoney(r.overdraft) } : {}),
  ...(decodeNotices(r.notices) ? { notices: decodeNotices(r.notices) } : {}),
})

interface KeyRow {
  id: string
  account_id: string
  hash: string
  prefix: string
  created_at: string
  settings: string
}

const KEY_COLUMNS = 'k.id, k.account_id, k.hash, k.prefix, k.created_at, k.settings'

const toKey = (r: KeyRow): ApiKeyRecord => ({
  id: r.id,
  accountId: r.account_id,
  hash: r.hash,
  prefix: r.prefix,
  createdAt: Number(r.created_at),
  ...decodeKeySettings(r.settings),
})

/** A key and its account from one row (the key's columns aliased k_*). */
type KeyAccountRow = AccountRow & {
  k_id: string
  k_hash: string
  k_prefix: string
  k_created_at: string
  k_settings: string
}
const KEY_ACCOUNT_COLUMNS = `k.id AS k_id, k.hash AS k_hash, k.prefix AS k_prefix, k.created_at AS k_created_at,
  k.settings AS k_settings, ${ACCOUNT_COLUMNS}`
const toLookup = (r: KeyAccountRow): KeyLookup => ({
  account: toAccount(r),
  key: toKey({
    id: r.k_id,
    account_id: r.id,
    hash: r.k_hash,
    prefix: r.k_prefix,
    created_at: r.k_created_at,
    settings: r.k_settings,
  }),
})

/** Accounts of API keys kept in memory for the lookup every request makes, at most. */
const KEY_CACHE = 10_000
/**
 * How long a cached lookup is used without asking the database again: the bound on a key revoked
 * (or an account changed) elsewhere still working here should the listening connection die silently.
 */
const KEY_CACHE_MAX_AGE_MS = 5_000

/**
 * The accounts of API keys this instance looked up. Used only while the listening connection is up
 * (`live`), so that a change made by any instance clears it; this instance's own changes clear it at
 * once. `epoch` moves at every clearing: a lookup sent before one is not cached.
 */
interface KeyCache {
  live: boolean
  epoch: number
  entries: Map<string, { found: KeyLookup; at: number }>
  forget(): void
}

function createKeyCache(): KeyCache {
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
function listenForAccountChanges(
  url: string,
  cache: KeyCache,
  options: Pick<PostgresStoreOptions, 'log' | 'onAccountsChanged'>,
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

function createAccounts(query: Query, transaction: Transaction, batch: Batch, cache: KeyCache): AccountStore {
  const lookUp = batched<string, KeyLookup | null>(
    batch,
    async (keyHash) => {
      const { rows } = await query<KeyAccountRow>(
        `SELECT ${KEY_ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = $1`,
        [keyHash],
        'account_by_key',
      )
      return rows[0] ? toLookup(rows[0]) : null
    },
    async (hashes) => {
      const { rows } = await query<KeyAccountRow>(
        `SELECT ${KEY_ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.hash = ANY ($1::text[])`,
        [hashes],
        'accounts_by_keys',
      )
      const found = new Map(rows.map((r) => [r.k_hash, r]))
      // Each caller gets its own objects, also when one batch looked the same key up twice.
      return hashes.map((h) => {
        const r = found.get(h)
        return r ? toLookup(r) : null
      })
    },
  )
  // Every request looks its key up: answered from the cache while it may be used; only keys that exist
  // are kept (an unknown key costs a query, not memory).
  const findKey = async (keyHash: string): Promise<KeyLookup | null> => {
    const sentAt = performance.now()
    const hit = cache.live ? cache.entries.get(keyHash) : undefined
    if (hit && sentAt - hit.at < KEY_CACHE_MAX_AGE_MS) return copyLookup(hit.found)
    const epoch = cache.epoch
    const found = await lookUp(keyHash)
    if (found && cache.live && cache.epoch === epoch) {
      if (cache.entries.size >= KEY_CACHE) cache.entries.clear()
      cache.entries.set(keyHash, { found: copyLookup(found), at: sentAt })
    }
    return found
  }
  /** This instance's own change: forgotten before the caller hears back (the others by notification). */
  const changing = async <T>(p: Promise<T>): Promise<T> => {
    cache.forget()
    try {
      return await p
    } finally {
      cache.forget()
    }
  }
  return {
    findKey,
    async findByKeyHash(keyHash) {
      return (await findKey(keyHash))?.account ?? null
    },
    async getKey(accountId, keyHash) {
      const { rows } = await query<KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 AND k.hash = $2`,
        [accountId, keyHash],
      )
      return rows[0] ? toKey(rows[0]) : null
    },
    async updateKey(accountId, keyHash, patch) {
      return changing(
        transaction(async (q) => {
          const { rows } = await q<KeyRow>(
            `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 AND k.hash = $2 FOR UPDATE`,
            [accountId, keyHash],
          )
          if (!rows[0]) return null
          const settings = encodeKeySettings({ ...toKey(rows[0]), ...patch })
          await q('UPDATE api_keys SET settings = $2 WHERE hash = $1', [keyHash, settings])
          return toKey({ ...rows[0], settings })
        }),
      )
    },
    async get(id) {
      const { rows } = await query<AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts a WHERE a.id = $1`, [
        id,
      ])
      return rows[0] ? toAccount(rows[0]) : null
    },
    async create(account, initialCredits) {
      // One statement: the account and its ledger exist together or not at all.
      const { rowCount } = await query(
        `WITH a AS (
           INSERT INTO accounts (id, name, created_at, discount_ppm, model_discounts_ppm, rate_limits, overdraft, notices)
           VALUES ($1, $2, $3, $4, $5, $6, $8, $9) ON CONFLICT (id) DO NOTHING RETURNING id)
         INSERT INTO ledger (account_id, credits, usage) SELECT id, $7, 0 FROM a`,
        [
          account.id,
          account.name,
          account.createdAt,
          account.discountPpm,
          JSON.stringify(account.modelDiscountsPpm),
          JSON.stringify(account.rateLimits),
          money(initialCredits),
          money(account.overdraft ?? 0n),
          encodeNotices(account.notices),
        ],
      )
      return rowCount === 1
    },
    async update(id, patch) {
      const json = (v: object | undefined) => (v === undefined ? null : JSON.stringify(v))
      const { rows } = await changing(
        query<AccountRow>(
          `UPDATE accounts a SET
           name = coalesce($2, a.name),
           discount_ppm = coalesce($3, a.discount_ppm),
           model_discounts_ppm = coalesce($4::jsonb, a.model_discounts_ppm),
           rate_limits = coalesce($5::jsonb, a.rate_limits),
           overdraft = coalesce($6::numeric, a.overdraft),
           notices = coalesce($7, a.notices)
         WHERE a.id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
          [
            id,
            patch.name ?? null,
            patch.discountPpm ?? null,
            json(patch.modelDiscountsPpm),
            json(patch.rateLimits),
            patch.overdraft === undefined ? null : money(patch.overdraft),
            patch.notices === undefined ? null : encodeNotices(patch.notices),
          ],
        ),
      )
      return rows[0] ? toAccount(rows[0]) : null
    },
    async list() {
      const { rows } = await query<AccountRow>(
        `SELECT ${ACCOUNT_COLUMNS} FROM accounts a ORDER BY a.created_at, a.id`,
      )
      return rows.map(toAccount)
    },
    async addKey(key) {
      try {
        await changing(
          query(
            `INSERT INTO api_keys (hash, id, account_id, prefix, created_at, settings) VALUES ($1, $2, $3, $4, $5, $6)
           ON CONFLICT (hash) DO UPDATE SET id = excluded.id, account_id = excluded.account_id,
             prefix = excluded.prefix, created_at = excluded.created_at, settings = excluded.settings`,
            [key.hash, key.id, key.accountId, key.prefix, key.createdAt, encodeKeySettings(key)],
          ),
        )
      } catch (err) {
        if (isUnknownAccount(err)) throw new Error(`unknown account ${key.accountId}`, { cause: err })
        throw err
      }
    },
    async listKeys(accountId) {
      const { rows } = await query<KeyRow>(
        `SELECT ${KEY_COLUMNS} FROM api_keys k WHERE k.account_id = $1 ORDER BY k.created_at, k.id`,
        [accountId],
      )
      return rows.map(toKey)
    },
    async removeKey(accountId, keyId) {
      const { rowCount } = await changing(
        query('DELETE FROM api_keys WHERE account_id = $1 AND id = $2', [accountId, keyId]),
      )
      return (rowCount ?? 0) > 0
    },
  }
}

interface CreditsRow {
  credits: string
  usage: string
  reserved: string
}

// The open holds from the ledger row's total of holds (kept by triggers, migration 13).
const OPEN_RESERVED = 'junction_open_held(ledger.account_id, ledger.held, $2) AS reserved'

const toCredits = (r: CreditsRow): Credits => ({
  totalCredits: toMoney(r.credits),
  totalUsage: toMoney(r.usage),
  reserved: toMoney(r.reserved),
})

interface SettleItem {
  ref: ReservationRef
  record: GenerationRecord
  limit: SettleLimit | undefined
}

interface ReserveItem {
  accountId: string
  id: string
  upperBound: Money
  now: number
  ttlMs: number
}

/** SQLSTATE deadlock_detected: the database rolled the statement back whole. */
const DEADLOCK = '40P01'

const settleNow = ({ record: r, limit }: SettleItem): number => limit?.now ?? r.createdAt + r.generationTimeMs

/** One settle as junction_settle_many (migration 10) reads it. */
const settleJson = (s: SettleItem) => {
  const r = s.record
  return {
    id: r.generationId,
    a: r.accountId,
    api: r.api,
    model: r.model,
    provider: r.provider,
    createdAt: r.createdAt,
    generationTimeMs: r.generationTimeMs,
    latencyMs: r.latencyMs,
    streamed: r.streamed,
    finishReason: r.finishReason,
    cancelled: r.cancelled,
    costSource: r.costSource,
    usage: r.usage,
    upstreamCost: money(r.upstreamCost),
    discountPpm: r.discountPpm,
    discount: money(r.discount),
    cost: money(r.cost),
    attempts: r.attempts ?? null,
    ref: s.ref.id,
    held: s.limit?.held === undefined ? null : money(s.limit.held),
    now: settleNow(s),
    tokens: r.usage.total_tokens,
    // For junction_key_charge (migration 11): the key (NULL: its hold's, if any) and the windows.
    key: r.keyHash ?? null,
    ...keyWindows(r.createdAt),
  }
}

const keyWindows = (t: number) => {
  const w = windowStarts(t)
  return { kd: w.day, kw: w.week, km: w.month }
}

/**
 * The accounts this instance saw with credits left in the last `creditsKnownMs` (a balance read said
 * so), for the check before a request's body, which is only an early refusal: the hold decides
 * exactly. Whatever this instance sees that can leave an account with nothing (a hold short of what
 * was asked or refused, a charge not within its hold, credits changed) forgets it at once; what
 * other instances spend is seen when the time is up.
 */
interface CreditsKnown {
  has(accountId: string): boolean
  saw(accountId: string, has: boolean): void
  forget(accountId: string): void
}

function createCreditsKnown(forMs: number): CreditsKnown {
  const seen = new Map<string, number>()
  return {
    has: (accountId) => {
      const at = seen.get(accountId)
      return at !== undefined && performance.now() - at < forMs
    },
    saw: (accountId, has) => {
      if (!has) return void seen.delete(accountId)
      if (seen.size >= KEY_CACHE) seen.clear()
      seen.set(accountId, performance.now())
    },
    forget: (accountId) => void seen.delete(accountId),
  }
}

/** A key's hold parameters as junction_reserve_key and the admissions take them (migrations 11, 13). */
const keyHoldParams = (key: KeyHold | undefined, now: number) => [
  key?.hash ?? null,
  key?.limit == null ? null : money(key.limit),
  key?.limitReset ?? null,
  key?.limitReset == null ? null : windowStart(key.limitReset, now),
]

/** A hold's amount as those functions return it: NULL refused for credits, -1 for the key's limit. */
const toKeyHeld = (
  amount: string | null | undefined,
  r: { id: string; accountId: string; expiresAt: number },
): { reservation: Reservation | null; keyLimited: boolean } => {
  if (amount == null) return { reservation: null, keyLimited: false }
  if (amount === '-1') return { reservation: null, keyLimited: true }
  return { reservation: { ...r, amount: toMoney(amount) }, keyLimited: false }
}

function createLedger(query: Query, batch: Batch, known: CreditsKnown): LedgerStore {
  const credits = batched<{ accountId: string; now: number }, Credits>(
    batch,
    async ({ accountId, now }) => {
      const { rows } = await query<CreditsRow>(
        `SELECT credits, usage, ${OPEN_RESERVED} FROM ledger WHERE account_id = $1`,
        [accountId, now],
        'credits',
      )
      return rows[0] ? toCredits(rows[0]) : { totalCredits: 0n, totalUsage: 0n, reserved: 0n }
    },
    async (items) => {
      const { rows } = await query<{
        i: string
        credits: string | null
        usage: string | null
        reserved: string
      }>(
        `SELECT q.i, l.credits, l.usage, junction_open_held(q.a, l.held, q.t) AS reserved
         FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS q(a, t, i)
         LEFT JOIN ledger l ON l.account_id = q.a`,
        [items.map((c) => c.accountId), items.map((c) => c.now)],
        'credits_many',
      )
      const out: Credits[] = items.map(() => ({ totalCredits: 0n, totalUsage: 0n, reserved: 0n }))
      for (const r of rows) {
        if (r.credits !== null && r.usage !== null) out[Number(r.i) - 1] = toCredits(r as CreditsRow)
      }
      return out
    },
  )

  const reserve = batched<ReserveItem, Reservation | null>(
    batch,
    async ({ accountId, id, upperBound, now, ttlMs }) => {
      const expiresAt = now + ttlMs
      // One round trip: junction_reserve (migration 2) locks the account's ledger row, so every
      // reserve of the account, from any process, runs one at a time and sees the holds before it.
      const { rows } = await query<{ amount: string | null }>(
        'SELECT junction_reserve($1, $2, $3, $4, $5) AS amount',
        [accountId, id, money(upperBound), expiresAt, now],
        'reserve',
      )
      const amount = rows[0]?.amount
      return amount == null ? null : { id, accountId, amount: toMoney(amount), expiresAt }
    },
    async (items) => {
      // One round trip and one commit for the batch: junction_reserve_many (migration 10) locks the
      // batch's ledger rows in account order, then reserves in the order of the calls.
      const { rows } = await query<{ amounts: (string | null)[] }>(
        // text[]: pg would read numeric[] as floats.
        'SELECT junction_reserve_many($1::text[], $2::text[], $3::numeric[], $4::bigint[], $5::bigint[])::text[] AS amounts',
        [
          items.map((r) => r.accountId),
          items.map((r) => r.id),
          items.map((r) => money(r.upperBound)),
          items.map((r) => r.now + r.ttlMs),
          items.map((r) => r.now),
        ],
        'reserve_many',
      )
      const amounts = rows[0]!.amounts
      return items.map(({ accountId, id, now, ttlMs }, i) => {
        const amount = amounts[i]
        return amount == null ? null : { id, accountId, amount: toMoney(amount), expiresAt: now + ttlMs }
      })
    },
  )

  const settleMany = async (
    items: SettleItem[],
    name = 'settle_many',
  ): Promise<(GenerationRecord | null)[]> => {
    // One round trip for the batch (junction_settle_durably, migration 13): each settle in order,
    // atomic with its record as alone, each record's key charged in the same transaction
    // (junction_key_charge, migration 11), the ledger rows freed before the disk is waited for, and
    // every one durable before any caller hears back.
    //
    // The same generation settled at once by two callers can deadlock: a settle within its hold
    // inserts its record before locking the ledger row, one past its hold locks the row first. The
    // database then rolls one back whole; it is sent again, and finds the other's record (a repeat,
    // charged nothing). Distinct generations never wait on each other's records.
    let rows: { costs: (string | null)[] }[] | undefined
    for (let attempt = 1; rows === undefined; attempt++) {
      try {
        ;({ rows } = await query<{ costs: (string | null)[] }>(
          'CALL junction_settle_durably($1::jsonb, NULL)',
          [JSON.stringify(items.map(settleJson))],
          name,
        ))
      } catch (err) {
        if (isUnknownAccount(err))
          throw new Error(`unknown account ${items[0]?.ref.accountId}`, { cause: err })
        if (!(err instanceof DatabaseError && err.code === DEADLOCK) || attempt >= 3) throw err
      }
    }
    const costs = rows[0]!.costs
    return items.map((s, i) => {
      const cost = costs[i]
      return cost == null ? null : capCharge(s.record, toMoney(cost))
    })
  }
  // A settle alone goes through the batch statement too: a record that names no key may take its
  // hold's (a prediction's), which junction_key_prepare looks up.
  const settle = batched<SettleItem, GenerationRecord | null>(
    batch,
    async (item) => (await settleMany([item], 'settle'))[0]!,
    settleMany,
  )

  return {
    credits: (accountId, now) => credits({ accountId, now }),
    async addCredits(accountId, amount, now) {
      known.forget(accountId)
      const { rows } = await query<CreditsRow>(
        `UPDATE ledger SET credits = credits + $3 WHERE account_id = $1 RETURNING credits, usage, ${OPEN_RESERVED}`,
        [accountId, now, money(amount)],
      )
      if (!rows[0]) throw new Error(`unknown account ${accountId}`)
      return toCredits(rows[0])
    },
    async reserveForKey(accountId, id, upperBound, now, ttlMs, key) {
      const expiresAt = now + ttlMs
      // One round trip: junction_reserve_key (migration 11, open holds from the ledger row since
      // migration 13) is junction_reserve plus the key's limit, under the same lock of the account's
      // ledger row.
      const { rows } = await query<{ amount: string | null }>(
        'SELECT junction_reserve_key($1, $2, $3, $4, $5, $6, $7, $8, $9)::text AS amount',
        [accountId, id, money(upperBound), expiresAt, now, ...keyHoldParams(key, now)],
        'reserve_key',
      )
      const held = toKeyHeld(rows[0]?.amount, { id, accountId, expiresAt })
      if (held.reservation === null || held.reservation.amount < upperBound) known.forget(accountId)
      return held
    },
    async keyUsage(accountId, keyHashes, now) {
      const { rows } = await query<{
        total: string | null
        day_start: string | null
        day: string | null
        week_start: string | null
        week: string | null
        month_start: string | null
        month: string | null
        held: string
      }>(
        `SELECT u.total, u.day_start, u.day, u.week_start, u.week, u.month_start, u.month,
           (SELECT coalesce(sum(r.amount), 0) FROM reservations r
             WHERE r.account_id = $1 AND r.key_hash = h.k AND r.expires_at > $3) AS held
         FROM unnest($2::text[]) WITH ORDINALITY AS h(k, i)
         LEFT JOIN key_usage u ON u.key_hash = h.k ORDER BY h.i`,
        [accountId, keyHashes, now],
      )
      return rows.map((r) =>
        usageAt(
          r.total === null
            ? undefined
            : {
                total: toMoney(r.total),
                dayStart: Number(r.day_start),
                day: toMoney(r.day!),
                weekStart: Number(r.week_start),
                week: toMoney(r.week!),
                monthStart: Number(r.month_start),
                month: toMoney(r.month!),
              },
          toMoney(r.held),
          now,
        ),
      )
    },
    async reserve(accountId, id, upperBound, now, ttlMs) {
      const r = await reserve({ accountId, id, upperBound, now, ttlMs })
      if (r === null || r.amount < upperBound) known.forget(accountId)
      return r
    },
    async renew(ref, now, ttlMs) {
      const { rowCount } = await query(
        'UPDATE reservations SET expires_at = $3 WHERE account_id = $1 AND id = $2 AND expires_at > $4',
        [ref.accountId, ref.id, now + ttlMs, now],
        'renew',
      )
      return (rowCount ?? 0) > 0
    },
    async settle(ref, record, limit) {
      if (record.accountId !== ref.accountId) {
        throw new Error(`generation ${record.generationId} settled against another account's reservation`)
      }
      // A charge within its hold leaves more free than before; any other may leave nothing.
      if (limit?.held === undefined || record.cost > limit.held) known.forget(record.accountId)
      return settle({ ref, record, limit })
    },
    async release(ref) {
      // The ledger row first (the trigger that updates its total of holds would lock it after the
      // hold's row, the reverse of what a settle does).
      await query(
        `WITH l AS (SELECT 1 FROM ledger WHERE account_id = $1 FOR NO KEY UPDATE)
         DELETE FROM reservations WHERE account_id = $1 AND id = $2 AND EXISTS (SELECT 1 FROM l)`,
        [ref.accountId, ref.id],
        'release',
      )
    },
  }
}

interface GenerationRow {
  generation_id: string
  account_id: string
  api: string
  model: string
  provider: string
  created_at: string
  generation_time_ms: string
  latency_ms: string
  streamed: boolean
  finish_reason: string | null
  cancelled: boolean
  cost_source: GenerationRecord['costSource']
  usage: GenerationRecord['usage']
  upstream_cost: string
  discount_ppm: number
  discount: string
  cost: string
  attempts: GenerationRecord['attempts'] | null
  unbilled_usd: string | null
  unbilled_tokens: string | null
  key_hash: string | null
}

const toRecord = (r: GenerationRow): GenerationRecord => ({
  generationId: r.generation_id,
  accountId: r.account_id,
  api: r.api,
  model: r.model,
  provider: r.provider,
  createdAt: Number(r.created_at),
  generationTimeMs: Number(r.generation_time_ms),
  latencyMs: Number(r.latency_ms),
  streamed: r.streamed,
  finishReason: r.finish_reason,
  cancelled: r.cancelled,
  costSource: r.cost_source,
  usage: r.usage,
  upstreamCost: toMoney(r.upstream_cost),
  discountPpm: r.discount_ppm,
  discount: toMoney(r.discount),
  cost: toMoney(r.cost),
  ...(r.unbilled_usd !== null
    ? { unbilledOverage: { usd: toMoney(r.unbilled_usd), tokens: Number(r.unbilled_tokens) } }
    : {}),
  ...(r.attempts ? { attempts: r.attempts } : {}),
  ...(r.key_hash !== null ? { keyHash: r.key_hash } : {}),
})

function createGenerations(query: Query): GenerationStore {
  return {
    async get(generationId) {
      const { rows } = await query<GenerationRow>('SELECT * FROM generations WHERE generation_id = $1', [
        generationId,
      ])
      return rows[0] ? toRecord(rows[0]) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      // The cursor is the last generation id of the previous page; an unknown one matches no seq.
      // A key filter uses its own index (generations_by_key). Parameters are numbered as they come.
      const params: unknown[] = [accountId, limit + 1]
      const where: string[] = []
      if (before !== undefined) {
        params.push(before)
        where.push(
          `AND seq < (SELECT seq FROM generations WHERE account_id = $1 AND generation_id = $${params.length})`,
        )
      }
      if (keyHash !== undefined) {
        params.push(keyHash)
        where.push(`AND key_hash = $${params.length}`)
      }
      if (model !== undefined) {
        params.push(model)
        where.push(`AND model = $${params.length}`)
      }
      const { rows } = await query<GenerationRow>(
        `SELECT * FROM generations WHERE account_id = $1 ${where.join(' ')} ORDER BY seq DESC LIMIT $2`,
        params,
      )
      const data = rows.slice(0, limit).map(toRecord)
      const more = rows.length > limit && data.length > 0
      return { data, nextCursor: more ? data.at(-1)!.generationId : null }
    },
    async activity(accountId, since, until) {
      const { rows } = await query<{
        day: string
        model: string
        requests: string
        prompt: string | null
        completion: string | null
        upstream_cost: string
        cost: string
      }>(
        `SELECT created_at - created_at % ${DAY_MS} AS day, model, count(*) AS requests,
           sum((usage->>'prompt_tokens')::bigint) AS prompt,
           sum((usage->>'completion_tokens')::bigint) AS completion,
           sum(upstream_cost)::text AS upstream_cost, sum(cost)::text AS cost
         FROM generations WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
         GROUP BY 1, 2`,
        [accountId, since, until],
      )
      return rows
        .map((r) => ({
          day: Number(r.day),
          model: r.model,
          requests: Number(r.requests),
          promptTokens: Number(r.prompt ?? 0),
          completionTokens: Number(r.completion ?? 0),
          upstreamCost: BigInt(r.upstream_cost),
          cost: BigInt(r.cost),
        }))
        .sort(byDayThenModel)
    },
  }
}

interface FileRow {
  id: string
  account_id: string
  bytes: string
  created_at: string
  filename: string
  purpose: FilePurpose
  content_type: string
  storage_key: string
}

const FILE_COLUMNS = 'id, account_id, bytes, created_at, filename, purpose, content_type, storage_key'

const toFile = (r: FileRow): StoredFile => ({
  id: r.id,
  accountId: r.account_id,
  bytes: Number(r.bytes),
  createdAt: Number(r.created_at),
  filename: r.filename,
  purpose: r.purpose,
  contentType: r.content_type,
  storageKey: r.storage_key,
})

function createFiles(query: Query, transaction: Transaction): FileStore {
  return {
    async reserve(accountId, quota, now, ttlMs) {
      return transaction(async (q) => {
        // The upsert locks the account's totals row: its quota checks run one at a time.
        const totals = await q<{ files: number; bytes: string }>(
          `INSERT INTO file_accounts (account_id) VALUES ($1)
           ON CONFLICT (account_id) DO UPDATE SET account_id = excluded.account_id RETURNING files, bytes`,
          [accountId],
        )
        const { files, bytes } = totals.rows[0]!
        const holds = await q<{ n: number }>(
          'SELECT count(*)::int AS n FROM file_holds WHERE account_id = $1 AND expires_at > $2',
          [accountId, now],
        )
        if (files + holds.rows[0]!.n >= quota.maxFiles) return { ok: false, reason: 'files' } as const
        if (Number(bytes) >= quota.maxBytes) return { ok: false, reason: 'bytes' } as const
        const token = randomUUID()
        await q('INSERT INTO file_holds (token, account_id, expires_at) VALUES ($1, $2, $3)', [
          token,
          accountId,
          now + ttlMs,
        ])
        return { ok: true, token, bytesLeft: quota.maxBytes - Number(bytes) } as const
      })
    },
    async commit(token, file, quota, now) {
      return transaction(async (q) => {
        const hold = await q<{ account_id: string }>('SELECT account_id FROM file_holds WHERE token = $1', [
          token,
        ])
        const owner = hold.rows[0]?.account_id
        if (owner === undefined) return false
        if (owner !== file.accountId) throw new Error('file reservation of another account')
        const totals = await q<{ bytes: string }>(
          'SELECT bytes FROM file_accounts WHERE account_id = $1 FOR UPDATE',
          [owner],
        )
        // Deleted under the lock: a concurrent commit or release of the same token finds nothing.
        const dropped = await q<{ expires_at: string }>(
          'DELETE FROM file_holds WHERE token = $1 RETURNING expires_at',
          [token],
        )
        const expiresAt = dropped.rows[0]?.expires_at
        if (expiresAt === undefined || Number(expiresAt) <= now) return false
        if (Number(totals.rows[0]?.bytes ?? 0) + file.bytes > quota.maxBytes) return false
        await q(
          `INSERT INTO files (account_id, id, bytes, created_at, filename, purpose, content_type, storage_key)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
          [
            file.accountId,
            file.id,
            file.bytes,
            file.createdAt,
            file.filename,
            file.purpose,
            file.contentType,
            file.storageKey,
          ],
        )
        await q('UPDATE file_accounts SET files = files + 1, bytes = bytes + $2 WHERE account_id = $1', [
          owner,
          file.bytes,
        ])
        return true
      })
    },
    async release(token) {
      await query('DELETE FROM file_holds WHERE token = $1', [token])
    },
    async get(accountId, id) {
      const { rows } = await query<FileRow>(
        `SELECT ${FILE_COLUMNS} FROM files WHERE account_id = $1 AND id = $2`,
        [accountId, id],
      )
      return rows[0] ? toFile(rows[0]) : null
    },
    async list(accountId, { purpose, order, after, limit }) {
      const asc = order === 'asc'
      // `after` must be in the same (filtered) list, as with memory: otherwise the page is empty.
      const { rows } = await query<FileRow>(
        `SELECT ${FILE_COLUMNS} FROM files WHERE account_id = $1 AND ($2::text IS NULL OR purpose = $2)
           AND ($3::text IS NULL OR seq ${asc ? '>' : '<'} (SELECT seq FROM files
             WHERE account_id = $1 AND id = $3 AND ($2::text IS NULL OR purpose = $2)))
         ORDER BY seq ${asc ? 'ASC' : 'DESC'} LIMIT $4`,
        [accountId, purpose ?? null, after ?? null, limit + 1],
      )
      return { files: rows.slice(0, limit).map(toFile), hasMore: rows.length > limit }
    },
    async delete(accountId, id) {
      const { rows } = await query<FileRow>(
        `WITH d AS (DELETE FROM files WHERE account_id = $1 AND id = $2 RETURNING ${FILE_COLUMNS}),
           u AS (UPDATE file_accounts t SET files = t.files - 1, bytes = t.bytes - d.bytes
                 FROM d WHERE t.account_id = d.account_id)
         SELECT * FROM d`,
        [accountId, id],
      )
      return rows[0] ? toFile(rows[0]) : null
    },
    async usage(accountId) {
      const { rows } = await query<{ files: number; bytes: string }>(
        'SELECT files, bytes FROM file_accounts WHERE account_id = $1',
        [accountId],
      )
      return { files: rows[0]?.files ?? 0, bytes: Number(rows[0]?.bytes ?? 0) }
    },
    async existingKeys(storageKeys) {
      if (storageKeys.length === 0) return new Set()
      const { rows } = await query<{ storage_key: string }>(
        'SELECT storage_key FROM files WHERE storage_key = ANY($1::text[])',
        [storageKeys],
      )
      return new Set(rows.map((r) => r.storage_key))
    },
  }
}

interface AdjustItem {
  key: string
  delta: number
  windowMs: number
  now: number
}

interface ConsumeItem {
  checks: readonly RateCheck[]
  windowMs: number
  now: number
}

type ConsumeRow = { fits: boolean; used: string }

/** The decisions of one consume call from its rows (one per check, in order). */
function toDecisions({ checks, windowMs, now }: ConsumeItem, rows: ConsumeRow[]) {
  const allowed = rows.every((r) => r.fits)
  const resetAt = now - (now % windowMs) + windowMs
  return {
    allowed,
    decisions: checks.map((check, i): RateDecision => {
      const used = Number(rows[i]!.used)
      return {
        allowed: rows[i]!.fits,
        limit: check.limit,
        remaining: Math.max(0, check.limit - used - (allowed ? check.amount : 0)),
        resetAt,
      }
    }),
  }
}

function createRateLimits(query: Query, batch: Batch): RateLimitStore {
  const consume = batched<ConsumeItem, { allowed: boolean; decisions: RateDecision[] }>(
    batch,
    async (item) => {
      const { checks, windowMs, now } = item
      // One round trip: junction_consume (migration 3) locks the windows in key order, rolls them over,
      // judges every check and counts all or nothing, with the same arithmetic as memory.ts.
      const { rows } = await query<ConsumeRow>(
        'SELECT fits, used FROM junction_consume($1::text[], $2::bigint[], $3::bigint[], $4, $5)',
        [checks.map((c) => c.key), checks.map((c) => c.amount), checks.map((c) => c.limit), windowMs, now],
        'consume',
      )
      return toDecisions(item, rows)
    },
    async (items) => {
      // One round trip for the batch: junction_consume_many (migration 10) locks every window of the
      // batch in key order, then runs junction_consume for each call in order.
      const first: number[] = []
      let next = 1
      for (const item of items) {
        first.push(next)
        next += item.checks.length
      }
      const flat = items.flatMap((item) => item.checks)
      const { rows } = await query<ConsumeRow & { call: number }>(
        `SELECT call, fits, used FROM junction_consume_many($1::integer[], $2::integer[], $3::bigint[],
           $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])`,
        [
          first,
          items.map((item) => item.checks.length),
          items.map((item) => item.windowMs),
          items.map((item) => item.now),
          flat.map((c) => c.key),
          flat.map((c) => c.amount),
          flat.map((c) => c.limit),
        ],
        'consume_many',
      )
      const perCall: ConsumeRow[][] = items.map(() => [])
      for (const r of rows) perCall[r.call - 1]!.push(r)
      return items.map((item, i) => toDecisions(item, perCall[i]!))
    },
  )
  // A request of an account with a tokens limit corrects its estimate when it ends: batched too.
  const adjust = batched<AdjustItem, void>(
    batch,
    async ({ key, delta, windowMs, now }) => {
      const start = now - (now % windowMs)
      // One statement: the ON CONFLICT branch sees the locked row and rolls it like rollWindow.
      await query(
        `INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
         VALUES ($1, $2, $3, greatest(0, $4::bigint), 0)
         ON CONFLICT (key) DO UPDATE SET
           window_ms = $2,
           start = $3,
           previous = CASE WHEN r.start = $3 THEN r.previous WHEN $3 - r.start = $2 THEN r.current ELSE 0 END,
           current = greatest(0, CASE WHEN r.start = $3 THEN r.current ELSE 0 END + $4::bigint)`,
        [key, windowMs, start, delta],
        'adjust',
      )
    },
    async (items) => {
      await query(
        'SELECT junction_adjust_many($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])',
        [
          items.map((i) => i.key),
          items.map((i) => i.delta),
          items.map((i) => i.windowMs),
          items.map((i) => i.now),
        ],
        'adjust_many',
      )
      return items.map(() => undefined)
    },
  )
  return {
    async sweep(now) {
      // Rows a consume holds are skipped (a consume locks several in key order; waiting for them here
      // could deadlock with it): a skipped row is current again, or goes at the next sweep.
      await query(
        `DELETE FROM rate_windows WHERE key IN (
           SELECT key FROM rate_windows WHERE $1 - start >= 2 * window_ms FOR UPDATE SKIP LOCKED)`,
        [now],
      )
    },
    async consume(checks, windowMs, now) {
      if (checks.length === 0) return { allowed: true, decisions: [] }
      return consume({ checks, windowMs, now })
    },
    adjust: (key, delta, windowMs, now) => adjust({ key, delta, windowMs, now }),
  }
}

/** The rate checks of several calls as junction_consume_many and the fused admissions take them. */
function flattenChecks(items: { checks: readonly RateCheck[]; windowMs: number; now: number }[]) {
  const first: number[] = []
  let next = 1
  for (const item of items) {
    first.push(next)
    next += item.checks.length
  }
  const flat = items.flatMap((item) => item.checks)
  return [
    first,
    items.map((item) => item.checks.length),
    items.map((item) => item.windowMs),
    items.map((item) => item.now),
    flat.map((c) => c.key),
    flat.map((c) => c.amount),
    flat.map((c) => c.limit),
  ]
}

interface BeforeBodyItem extends ConsumeItem {
  accountId: string
  credits: boolean
}

interface AdmitItem extends ConsumeItem {
  accountId: string
  id: string
  upperBound: Money
  ttlMs: number
  key: KeyHold | undefined
}

/**
 * AdmissionStore: each step one statement for the whole batch of calls pending at once
 * (junction_before_body_many, junction_admit_many: migration 13), the limits and the balance read, or
 * the limits and the hold, instead of two round trips in a row. The hold's commit does not wait for
 * the disk (see the migration); the settle's does.
 */
function createAdmission(query: Query, batch: Batch, known: CreditsKnown): AdmissionStore {
  const beforeBodyMany = async (items: BeforeBodyItem[]): Promise<BeforeBodyOutcome[]> => {
    const { rows } = await query<ConsumeRow & { call: number; has: boolean | null }>(
      `SELECT call, fits, used, has FROM junction_before_body_many($1::integer[], $2::integer[],
         $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[])`,
      [...flattenChecks(items), items.map((item) => (item.credits ? item.accountId : null))],
      'before_body_many',
    )
    const checks: ConsumeRow[][] = items.map(() => [])
    const has: (boolean | null)[] = items.map(() => null)
    for (const r of rows) {
      if (r.has === null) checks[r.call - 1]!.push(r)
      else has[r.call - 1] = r.has
    }
    return items.map((item, i) => {
      const decided = toDecisions(item, checks[i]!)
      const hasCredits = decided.allowed && item.credits ? has[i]! : null
      if (hasCredits !== null) known.saw(item.accountId, hasCredits)
      return { ...decided, hasCredits }
    })
  }
  // A call alone without rate checks is a plain statement: the many-call function costs more to run.
  const beforeBodyOne = async (item: BeforeBodyItem): Promise<BeforeBodyOutcome> => {
    if (item.checks.length > 0) return (await beforeBodyMany([item]))[0]!
    const { rows } = await query<{ has: boolean }>(
      'SELECT credits - usage - junction_open_held(account_id, held, $2) > 0 AS has FROM ledger WHERE account_id = $1',
      [item.accountId, item.now],
      'has_credits',
    )
    const has = rows[0]?.has === true
    known.saw(item.accountId, has)
    return { allowed: true, decisions: [], hasCredits: has }
  }
  const beforeBody = batched<BeforeBodyItem, BeforeBodyOutcome>(batch, beforeBodyOne, beforeBodyMany)
  const admitMany = async (items: AdmitItem[]): Promise<AdmitOutcome[]> => {
    const keys = items.map((item) => keyHoldParams(item.key, item.now))
    const { rows } = await query<ConsumeRow & { call: number; amount: string | null }>(
      `SELECT call, fits, used, amount FROM junction_admit_many($1::integer[], $2::integer[],
         $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[], $9::text[],
         $10::numeric[], $11::bigint[], $12::text[], $13::numeric[], $14::text[], $15::bigint[])`,
      [
        ...flattenChecks(items),
        items.map((item) => item.accountId),
        items.map((item) => item.id),
        items.map((item) => money(item.upperBound)),
        items.map((item) => item.now + item.ttlMs),
        ...[0, 1, 2, 3].map((j) => keys.map((k) => k[j])),
      ],
      'admit_many',
    )
    const checks: ConsumeRow[][] = items.map(() => [])
    const amounts: (string | null)[] = items.map(() => null)
    for (const r of rows) {
      if (r.fits === null) amounts[r.call - 1] = r.amount
      else checks[r.call - 1]!.push(r)
    }
    return items.map((item, i) => {
      const decided = toDecisions(item, checks[i]!)
      const amount = decided.allowed ? amounts[i] : null
      const held = toKeyHeld(amount, {
        id: item.id,
        accountId: item.accountId,
        expiresAt: item.now + item.ttlMs,
      })
      // As composeAdmission: keyLimited only for a request with a key that the limits let through.
      return { ...decided, ...(decided.allowed && item.key ? held : { reservation: held.reservation }) }
    })
  }
  const admitOne = async (item: AdmitItem): Promise<AdmitOutcome> => {
    if (item.checks.length > 0) return (await admitMany([item]))[0]!
    const expiresAt = item.now + item.ttlMs
    const { rows } = await query<{ amount: string | null }>(
      'SELECT junction_admit_one($1, $2, $3, $4, $5, $6, $7, $8, $9)::text AS amount',
      [
        item.accountId,
        item.id,
        money(item.upperBound),
        expiresAt,
        item.now,
        ...keyHoldParams(item.key, item.now),
      ],
      'admit_one',
    )
    const held = toKeyHeld(rows[0]?.amount, { id: item.id, accountId: item.accountId, expiresAt })
    return { allowed: true, decisions: [], ...(item.key ? held : { reservation: held.reservation }) }
  }
  const admit = batched<AdmitItem, AdmitOutcome>(batch, admitOne, admitMany)

  return {
    async beforeBody(accountId, checks, windowMs, now, credits) {
      if (checks.length === 0 && !credits) return { allowed: true, decisions: [], hasCredits: null }
      // Without rate checks, an account seen with credits a moment ago is not asked again.
      if (checks.length === 0 && known.has(accountId))
        return { allowed: true, decisions: [], hasCredits: true }
      return beforeBody({ accountId, checks, windowMs, now, credits })
    },
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs, key) {
      const r = await admit({ checks, windowMs, now, accountId, id, upperBound, ttlMs, key })
      if (r.allowed && (r.reservation === null || r.reservation.amount < upperBound)) known.forget(accountId)
      return r
    },
  }
}

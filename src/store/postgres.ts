import { randomUUID } from 'node:crypto'
import pg from 'pg'
import type { PoolClient, QueryResult, QueryResultRow } from 'pg'
import { capCharge } from '../billing/overage.ts'
import { GatewayError } from '../errors.ts'
import type { Money } from '../billing/money.ts'
import type { Logger } from '../logger.ts'
import type { FilePurpose, FileStore, StoredFile } from './files.ts'
import { migrations } from './postgres-migrations.ts'
import { createBatcher, type BatcherOptions } from './postgres-batch.ts'
import { createPostgresTaskStores } from './postgres-tasks.ts'
import { createPostgresResponseStore } from './responses.ts'
import type {
  Account,
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

// The PostgreSQL backend: every instance of the gateway pointed at one database behaves as one
// gateway. Every read-modify-write is one statement, or one transaction that first locks the row
// that decides (the account's ledger row, its file totals, the rate windows in key order), so two
// processes never both spend the same credit. Money travels as decimal strings (NUMERIC(40,0)
// picodollars), never as a JavaScript number.
//
// Connection failures become `store_unavailable` (503); the pool reconnects by itself when the
// database is back. Any other database error is a bug and is thrown as it is.

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

// SQLSTATE classes meaning "the database cannot serve now": connection exception, insufficient
// resources (too many connections), operator intervention (shutdown, starting up).
const UNAVAILABLE_STATE = /^(08|53|57P0)/

/** A database failure as the gateway reports it: unreachable is a 503; anything else is unexpected. */
export function toStoreError(err: unknown): unknown {
  if (err instanceof DatabaseError && !UNAVAILABLE_STATE.test(err.code ?? '')) return err
  // Refused, reset, terminated, timed out: socket errors and pg's own have no SQLSTATE.
  return new GatewayError('store_unavailable', 'the state store is unavailable', { cause: err })
}

/** The URL without its password, for logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url)
    if (u.password) u.password = '***'
    return u.toString()
  } catch {
    return '(unparseable database URL)'
  }
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
    accounts: createAccounts(query, batch, keyCache),
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
      // of migration 11 update it when its holds go): a sweep never deadlocks with a batch.
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
}

const ACCOUNT_COLUMNS =
  'a.id, a.name, a.created_at, a.discount_ppm, a.model_discounts_ppm, a.rate_limits, a.overdraft'

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  name: r.name,
  createdAt: Number(r.created_at),
  discountPpm: r.discount_ppm,
  modelDiscountsPpm: r.model_discounts_ppm,
  rateLimits: r.rate_limits,
  ...(toMoney(r.overdraft) !== 0n ? { overdraft: toMoney(r.overdraft) } : {}),
})

interface KeyRow {
  id: string
  account_id: string
  hash: string
  prefix: string
  created_at: string
}

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
  entries: Map<string, { account: Account; at: number }>
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

const copyAccount = (a: Account): Account => ({
  ...a,
  modelDiscountsPpm: { ...a.modelDiscountsPpm },
  rateLimits: { ...a.rateLimits },
})

/**
 * One connection outside the pool listening for `junction_accounts` (sent by triggers of migration
 * 11 when accounts or keys change): every notification clears the key cache. While the connection is
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

function createAccounts(query: Query, batch: Batch, cache: KeyCache): AccountStore {
  const lookUp = batched<string, Account | null>(
    batch,
    async (keyHash) => {
      const { rows } = await query<AccountRow>(
        `SELECT ${ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.hash = $1`,
        [keyHash],
        'account_by_key',
      )
      return rows[0] ? toAccount(rows[0]) : null
    },
    async (hashes) => {
      const { rows } = await query<AccountRow & { hash: string }>(
        `SELECT k.hash, ${ACCOUNT_COLUMNS} FROM api_keys k JOIN accounts a ON a.id = k.account_id
         WHERE k.hash = ANY ($1::text[])`,
        [hashes],
        'accounts_by_keys',
      )
      const found = new Map(rows.map((r) => [r.hash, toAccount(r)]))
      return hashes.map((h) => found.get(h) ?? null)
    },
  )
  // Every request looks its key up: answered from the cache while it may be used; only keys that exist
  // are kept (an unknown key costs a query, not memory).
  const findByKeyHash = async (keyHash: string): Promise<Account | null> => {
    const sentAt = performance.now()
    const hit = cache.live ? cache.entries.get(keyHash) : undefined
    if (hit && sentAt - hit.at < KEY_CACHE_MAX_AGE_MS) return copyAccount(hit.account)
    const epoch = cache.epoch
    const account = await lookUp(keyHash)
    if (account && cache.live && cache.epoch === epoch) {
      if (cache.entries.size >= KEY_CACHE) cache.entries.clear()
      cache.entries.set(keyHash, { account: copyAccount(account), at: sentAt })
    }
    return account
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
    findByKeyHash,
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
           INSERT INTO accounts (id, name, created_at, discount_ppm, model_discounts_ppm, rate_limits, overdraft)
           VALUES ($1, $2, $3, $4, $5, $6, $8) ON CONFLICT (id) DO NOTHING RETURNING id)
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
           overdraft = coalesce($6::numeric, a.overdraft)
         WHERE a.id = $1 RETURNING ${ACCOUNT_COLUMNS}`,
          [
            id,
            patch.name ?? null,
            patch.discountPpm ?? null,
            json(patch.modelDiscountsPpm),
            json(patch.rateLimits),
            patch.overdraft === undefined ? null : money(patch.overdraft),
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
            `INSERT INTO api_keys (hash, id, account_id, prefix, created_at) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (hash) DO UPDATE SET id = excluded.id, account_id = excluded.account_id,
             prefix = excluded.prefix, created_at = excluded.created_at`,
            [key.hash, key.id, key.accountId, key.prefix, key.createdAt],
          ),
        )
      } catch (err) {
        if (isUnknownAccount(err)) throw new Error(`unknown account ${key.accountId}`, { cause: err })
        throw err
      }
    },
    async listKeys(accountId) {
      const { rows } = await query<KeyRow>(
        'SELECT id, account_id, hash, prefix, created_at FROM api_keys WHERE account_id = $1 ORDER BY created_at, id',
        [accountId],
      )
      return rows.map((r): ApiKeyRecord => ({
        id: r.id,
        accountId: r.account_id,
        hash: r.hash,
        prefix: r.prefix,
        createdAt: Number(r.created_at),
      }))
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

// The open holds from the ledger row's total of holds (kept by triggers, migration 11).
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

const SETTLE_ONE = `WITH c AS (
   SELECT least($17::numeric, junction_charge_ceiling($2, $18, $20::numeric, $21, $17::numeric)) AS cost),
 ins AS (
   INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
     generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
     upstream_cost, discount_ppm, discount, cost, attempts, unbilled_usd, unbilled_tokens)
   SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, c.cost, $19,
     CASE WHEN c.cost < $17::numeric THEN $17::numeric - c.cost END,
     CASE WHEN c.cost < $17::numeric
       THEN floor(($22::numeric * ($17::numeric - c.cost) * 2 + $17::numeric) / (2 * $17::numeric))
     END
   FROM c
   ON CONFLICT (generation_id) DO NOTHING RETURNING account_id, cost),
 del AS (
   DELETE FROM reservations WHERE account_id = $2 AND id = $18 AND EXISTS (SELECT 1 FROM ins)),
 upd AS (
   UPDATE ledger SET usage = usage + (SELECT cost FROM ins) WHERE account_id = $2 AND EXISTS (SELECT 1 FROM ins))
 SELECT cost FROM ins`

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
  }
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

  const settleOne = async ({ ref, record: r, limit }: SettleItem): Promise<GenerationRecord | null> => {
    // One statement, so one transaction: the record, the charge and the dropped hold commit together.
    // A repeated generation id inserts nothing, and then nothing else happens either. The charge is
    // capped as billing/overage.ts does it, by junction_charge_ceiling (migration 8): a cost within
    // its open hold as it is, any other after locking the account's ledger row and reading the
    // balance and the other holds.
    try {
      const { rows } = await query<{ cost: string }>(
        SETTLE_ONE,
        [
          r.generationId,
          r.accountId,
          r.api,
          r.model,
          r.provider,
          r.createdAt,
          r.generationTimeMs,
          r.latencyMs,
          r.streamed,
          r.finishReason,
          r.cancelled,
          r.costSource,
          JSON.stringify(r.usage),
          money(r.upstreamCost),
          r.discountPpm,
          money(r.discount),
          money(r.cost),
          ref.id,
          r.attempts ? JSON.stringify(r.attempts) : null,
          limit?.held === undefined ? null : money(limit.held),
          settleNow({ ref, record: r, limit }),
          r.usage.total_tokens,
        ],
        'settle',
      )
      return rows[0] ? capCharge(r, toMoney(rows[0].cost)) : null
    } catch (err) {
      if (isUnknownAccount(err)) throw new Error(`unknown account ${ref.accountId}`, { cause: err })
      throw err
    }
  }

  const settle = batched<SettleItem, GenerationRecord | null>(batch, settleOne, async (items) => {
    // One round trip for the batch (junction_settle_many, migration 10, by junction_settle_durably,
    // migration 11, which frees the ledger rows before waiting for the disk): each settle in order,
    // atomic with its record as alone, and every one durable before any caller hears back.
    const { rows } = await query<{ costs: (string | null)[] }>(
      'CALL junction_settle_durably($1::jsonb, NULL)',
      [JSON.stringify(items.map(settleJson))],
      'settle_many',
    )
    const costs = rows[0]!.costs
    return items.map((s, i) => {
      const cost = costs[i]
      return cost == null ? null : capCharge(s.record, toMoney(cost))
    })
  })

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
})

function createGenerations(query: Query): GenerationStore {
  return {
    async get(generationId) {
      const { rows } = await query<GenerationRow>('SELECT * FROM generations WHERE generation_id = $1', [
        generationId,
      ])
      return rows[0] ? toRecord(rows[0]) : null
    },
    async listByAccount(accountId, { limit, before }) {
      // The cursor is the last generation id of the previous page; an unknown one matches no seq.
      const { rows } =
        before === undefined
          ? await query<GenerationRow>(
              'SELECT * FROM generations WHERE account_id = $1 ORDER BY seq DESC LIMIT $2',
              [accountId, limit + 1],
            )
          : await query<GenerationRow>(
              `SELECT * FROM generations WHERE account_id = $1
                 AND seq < (SELECT seq FROM generations WHERE account_id = $1 AND generation_id = $3)
               ORDER BY seq DESC LIMIT $2`,
              [accountId, limit + 1, before],
            )
      const data = rows.slice(0, limit).map(toRecord)
      const more = rows.length > limit && data.length > 0
      return { data, nextCursor: more ? data.at(-1)!.generationId : null }
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
}

/**
 * AdmissionStore: each step one statement for the whole batch of calls pending at once
 * (junction_before_body_many, junction_admit_many: migration 11), the limits and the balance read, or
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
    const { rows } = await query<ConsumeRow & { call: number; amount: string | null }>(
      `SELECT call, fits, used, amount FROM junction_admit_many($1::integer[], $2::integer[],
         $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[], $8::text[], $9::text[],
         $10::numeric[], $11::bigint[])`,
      [
        ...flattenChecks(items),
        items.map((item) => item.accountId),
        items.map((item) => item.id),
        items.map((item) => money(item.upperBound)),
        items.map((item) => item.now + item.ttlMs),
      ],
      'admit_many',
    )
    const checks: ConsumeRow[][] = items.map(() => [])
    const held: (string | null)[] = items.map(() => null)
    for (const r of rows) {
      if (r.fits === null) held[r.call - 1] = r.amount
      else checks[r.call - 1]!.push(r)
    }
    return items.map((item, i) => {
      const decided = toDecisions(item, checks[i]!)
      const amount = decided.allowed ? held[i] : null
      return {
        ...decided,
        reservation:
          amount == null
            ? null
            : {
                id: item.id,
                accountId: item.accountId,
                amount: toMoney(amount),
                expiresAt: item.now + item.ttlMs,
              },
      }
    })
  }
  const admitOne = async (item: AdmitItem): Promise<AdmitOutcome> => {
    if (item.checks.length > 0) return (await admitMany([item]))[0]!
    const expiresAt = item.now + item.ttlMs
    const { rows } = await query<{ amount: string | null }>(
      'SELECT junction_admit_one($1, $2, $3, $4, $5)::text AS amount',
      [item.accountId, item.id, money(item.upperBound), expiresAt, item.now],
      'admit_one',
    )
    const amount = rows[0]?.amount
    return {
      allowed: true,
      decisions: [],
      reservation:
        amount == null
          ? null
          : { id: item.id, accountId: item.accountId, amount: toMoney(amount), expiresAt },
    }
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
    async reserve(checks, windowMs, accountId, id, upperBound, now, ttlMs) {
      const r = await admit({ checks, windowMs, now, accountId, id, upperBound, ttlMs })
      if (r.allowed && (r.reservation === null || r.reservation.amount < upperBound)) known.forget(accountId)
      return r
    },
  }
}

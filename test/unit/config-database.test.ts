import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { usd } from '../../src/billing/money.ts'
import { ConfigError, loadConfig } from '../../src/config.ts'
import { DEFAULT_DATABASE_PATH } from '../../src/store/config.ts'
import { createDeps } from '../../src/deps.ts'
import { createLogger } from '../../src/logger.ts'
import { describeBackend } from '../../src/store/create.ts'
import { redactUrl } from '../../src/store/database-url.ts'

const withFile = (file: unknown, env: Record<string, string> = {}) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', ...env }, () => JSON.stringify(file))

describe('database selection', () => {
  it('defaults to the SQLite file ./data/junction.db, whatever the files directory', () => {
    expect(loadConfig({}).database).toEqual({
      backend: { kind: 'sqlite', path: DEFAULT_DATABASE_PATH },
      timeoutMs: 5000,
      readyTimeoutMs: 2000,
    })
    expect(DEFAULT_DATABASE_PATH).toBe('./data/junction.db')
    expect(loadConfig({ GATEWAY_FILES_DIR: '/srv/files' }).database.backend).toEqual({
      kind: 'sqlite',
      path: './data/junction.db',
    })
  })

  it('reads GATEWAY_DATABASE_URL before the file, in every accepted form', () => {
    const url = (u: string) => loadConfig({ GATEWAY_DATABASE_URL: u }).database.backend
    expect(url('memory')).toEqual({ kind: 'memory' })
    expect(url('sqlite:/var/lib/junction/state.db')).toEqual({
      kind: 'sqlite',
      path: '/var/lib/junction/state.db',
    })
    expect(url('sqlite:///var/lib/j.db')).toEqual({ kind: 'sqlite', path: '/var/lib/j.db' })
    expect(url('./state.sqlite')).toEqual({ kind: 'sqlite', path: './state.sqlite' })
    expect(url('postgres://u:p@db:5432/j')).toEqual({ kind: 'postgres', url: 'postgres://u:p@db:5432/j' })
    expect(url('postgresql://db/j')).toEqual({ kind: 'postgres', url: 'postgresql://db/j' })
    expect(
      withFile({ database: { url: 'memory', retentionDays: 30 } }, { GATEWAY_DATABASE_URL: 'x.db' }).database,
    ).toMatchObject({ backend: { kind: 'sqlite', path: 'x.db' }, retentionDays: 30 })
    expect(withFile({ database: { url: 'memory' } }).database.backend).toEqual({ kind: 'memory' })
  })

  it('reads how long a call and /readyz wait for the store', () => {
    expect(withFile({ database: { timeoutMs: 800, readyTimeoutMs: 300 } }).database).toMatchObject({
      timeoutMs: 800,
      readyTimeoutMs: 300,
    })
    expect(() => withFile({ database: { timeoutMs: 0 } })).toThrow(/database\.timeoutMs/)
    expect(() => withFile({ database: { readyTimeoutMs: 'soon' } })).toThrow(/database\.readyTimeoutMs/)
  })

  it('refuses what names no backend, naming where it came from', () => {
    expect(() => loadConfig({ GATEWAY_DATABASE_URL: 'mysql://db' })).toThrow(ConfigError)
    expect(() => loadConfig({ GATEWAY_DATABASE_URL: 'memroy' })).toThrow(/GATEWAY_DATABASE_URL/)
    expect(() => withFile({ database: { url: 'sqlite:' } })).toThrow(/database\.url/)
    expect(() => withFile({ database: { retentionDays: -1 } })).toThrow(/database\.retentionDays/)
  })

  it('logs where the state is, never a password', () => {
    expect(redactUrl('postgres://junction:s3cret@db:5432/j')).toBe('postgres://junction:***@db:5432/j')
    expect(describeBackend({ kind: 'postgres', url: 'postgresql://u:pw@h/d' }).location).not.toContain('pw')
    expect(describeBackend({ kind: 'sqlite', path: 'data/x.db' }).location).toMatch(/^\/.*data\/x\.db$/)
  })
})

describe('config accounts applied at start', () => {
  const dir = mkdtempSync(join(tmpdir(), 'junction-seed-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))
  const log = createLogger('silent')

  const account = (over: Record<string, unknown> = {}) => ({
    id: 'acme',
    name: 'Acme',
    keys: ['sk-acme-key-1'],
    credits: 10,
    discountPercent: 0.1,
    rateLimits: { requestsPerMinute: 60 },
    ...over,
  })
  /** One start of the gateway on `db` with `file`'s accounts; returns what the store then holds. */
  const start = async (
    db: string,
    acct: Record<string, unknown>,
    change?: (d: Awaited<ReturnType<typeof createDeps>>) => Promise<void>,
  ) => {
    const deps = await createDeps(withFile({ accounts: [acct] }, { GATEWAY_DATABASE_URL: db }), { log })
    try {
      await change?.(deps)
      return {
        account: await deps.store.accounts.get('acme'),
        credits: await deps.store.ledger.credits('acme', 0),
        keys: (await deps.store.accounts.listKeys('acme')).map((k) => k.id),
      }
    } finally {
      await deps.close()
    }
  }

  it('creates with opening credits; admin changes survive restarts until the file changes that field', async () => {
    const db = `sqlite:${join(dir, 'seed.db')}`
    const first = await start(db, account(), async (d) => {
      // What the admin API does between starts.
      await d.store.accounts.update('acme', { name: 'Acme Corp', rateLimits: { requestsPerMinute: 5 } })
      await d.store.ledger.addCredits('acme', usd(5), 0)
      await d.store.accounts.removeKey('acme', (await d.store.accounts.listKeys('acme'))[0]!.id)
    })
    expect(first.credits.totalCredits).toBe(usd(15))
    expect(first.keys).toEqual([])

    // Same file: the admin's name, rate limits and credits stay; the file's key is back.
    const second = await start(db, account())
    expect(second.account).toMatchObject({
      name: 'Acme Corp',
      rateLimits: { requestsPerMinute: 5 },
      discountPpm: 100_000,
    })
    expect(second.credits.totalCredits).toBe(usd(15))
    expect(second.keys).toHaveLength(1)

    // The file changes the rate limits and the credits: the rate limits apply, credits are opening only.
    const third = await start(db, account({ rateLimits: { requestsPerMinute: 100 }, credits: 99 }))
    expect(third.account).toMatchObject({ name: 'Acme Corp', rateLimits: { requestsPerMinute: 100 } })
    expect(third.credits.totalCredits).toBe(usd(15))

    // A second key in the file is added; the first one is kept.
    const fourth = await start(db, account({ keys: ['sk-acme-key-1', 'sk-acme-key-2'] }))
    expect(fourth.keys).toHaveLength(2)
  })

  it('applies one model discount or one rate limit without touching the others the admin set', async () => {
    const db = `sqlite:${join(dir, 'entries.db')}`
    const bare = { id: 'acme', keys: ['sk-acme-key-1'] }
    await start(db, bare, async (d) => {
      await d.store.accounts.update('acme', {
        modelDiscountsPpm: { 'mock/chat': 500_000 },
        rateLimits: { requestsPerMinute: 2 },
      })
    })
    const after = await start(db, {
      ...bare,
      modelDiscounts: { 'openai/gpt-4.1': 0.2 },
      rateLimits: { tokensPerMinute: 1000 },
    })
    expect(after.account).toMatchObject({
      discountPpm: 0,
      modelDiscountsPpm: { 'mock/chat': 500_000, 'openai/gpt-4.1': 200_000 },
      rateLimits: { requestsPerMinute: 2, tokensPerMinute: 1000 },
    })
  })

  it('reads the applied settings an earlier version recorded whole', async () => {
    const db = `sqlite:${join(dir, 'earlier.db')}`
    await start(db, account(), async (d) => {
      // What an earlier version wrote, then an admin change of the rate limits.
      await d.store.appliedConfig!.set(
        'acme',
        '{"discountPpm":100000,"modelDiscountsPpm":{},"name":"Acme","rateLimits":{"requestsPerMinute":60}}',
      )
      await d.store.accounts.update('acme', { rateLimits: { requestsPerMinute: 5 } })
    })
    expect((await start(db, account())).account?.rateLimits).toEqual({ requestsPerMinute: 5 })
  })
})

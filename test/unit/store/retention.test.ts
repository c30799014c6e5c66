import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { usd } from '../../../src/billing/money.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import { createPostgresStore } from '../../../src/store/postgres/index.ts'
import { createSqliteStore } from '../../../src/store/sqlite/index.ts'
import type { Store } from '../../../src/store/types.ts'
import { accountFixture, generationFixture } from '../../contract/store.ts'
import { useTestDatabase } from '../../support/postgres.ts'

// database.retentionDays, on every backend: a store option, so outside the contract suite.

const dir = mkdtempSync(join(tmpdir(), 'junction-retention-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const database = useTestDatabase()

describe.each([
  ['memory', async (days: number): Promise<Store> => createMemoryStore({ retentionDays: days })],
  [
    'sqlite',
    async (days: number): Promise<Store> =>
      createSqliteStore(join(dir, `${randomUUID()}.db`), { retentionDays: days }),
  ],
  [
    'postgres',
    async (days: number): Promise<Store> =>
      createPostgresStore((await database()).url, { retentionDays: days }),
  ],
] as const)('retention (%s)', (_name, make) => {
  it('sweep deletes records older than retentionDays; the usage total stays', async () => {
    const store = await make(1)
    onTestFinished(() => store.close())
    const acct = `acct-${randomUUID()}`
    await store.accounts.create(accountFixture(acct), usd(1))
    const day = 86_400_000
    const old = generationFixture(`old-${acct}`, acct, { createdAt: 0, cost: 5n })
    const recent = generationFixture(`recent-${acct}`, acct, { createdAt: day, cost: 7n })
    await store.ledger.settle({ id: 'a', accountId: acct }, old)
    await store.ledger.settle({ id: 'b', accountId: acct }, recent)
    await store.sweep(day + 1)
    expect(await store.generations.get(old.generationId)).toBeNull()
    expect(await store.generations.get(recent.generationId)).toEqual(recent)
    expect((await store.generations.listByAccount(acct, { limit: 10 })).data).toEqual([recent])
    expect((await store.ledger.credits(acct, 0)).totalUsage).toBe(12n)
  })
})

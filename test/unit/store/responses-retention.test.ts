import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import { createPostgresStore } from '../../../src/store/postgres/index.ts'
import { createSqliteStore } from '../../../src/store/sqlite/index.ts'
import type { Store } from '../../../src/store/types.ts'
import { useTestDatabase } from '../../support/postgres.ts'

// Stored responses share the generation records' retention: each backend's sweep deletes both.

const DAY = 86_400_000
const database = useTestDatabase()
const dir = mkdtempSync(join(tmpdir(), 'junction-responses-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const backends: [string, () => Promise<Store>][] = [
  ['memory', async () => createMemoryStore({ retentionDays: 2 })],
  [
    'sqlite',
    async () => createSqliteStore(join(dir, 'junction.db'), { retentionDays: 2, checkpointIntervalMs: 0 }),
  ],
  ['postgres', async () => createPostgresStore((await database()).url, { retentionDays: 2 })],
]

describe.each(backends)('stored responses retention: %s', (_name, open) => {
  it('the sweep deletes responses older than the retention and keeps the younger', async () => {
    const store = await open()
    onTestFinished(() => store.close())
    const put = (id: string, createdAt: number) =>
      store.responses.put({ id, accountId: 'acct', createdAt, input: [], response: { id } })
    await put('resp_old', 1 * DAY)
    await put('resp_young', 9 * DAY)
    await store.sweep(10 * DAY)
    expect(await store.responses.get('acct', 'resp_old')).toBeNull()
    expect(await store.responses.get('acct', 'resp_young')).toMatchObject({ id: 'resp_young' })
  })
})

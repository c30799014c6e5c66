import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll } from 'vitest'
import { createSqliteStore } from '../../../src/store/sqlite/index.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { describeTaskStoreContract } from '../../contract/tasks.ts'

// The contract against a fresh database file per test, as production runs it (WAL on disk).
const dir = mkdtempSync(join(tmpdir(), 'junction-sqlite-contract-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0

describeStoreContract('sqlite', async () => createSqliteStore(join(dir, `t${++n}.db`)))

// The prediction stores: a fresh file per test too; `another` opens a second connection on it (a
// second process, or the same one after a restart).
describeTaskStoreContract(
  'sqlite',
  async () => {
    const path = join(dir, `t${++n}.db`)
    return { store: createSqliteStore(path), another: async () => createSqliteStore(path) }
  },
  { shared: true },
)

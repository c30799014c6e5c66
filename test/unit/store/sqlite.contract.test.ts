import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll } from 'vitest'
import { createSqliteStore } from '../../../src/store/sqlite.ts'
import { describeStoreContract } from '../../contract/store.ts'

// The contract against a fresh database file per test, as production runs it (WAL on disk).
const dir = mkdtempSync(join(tmpdir(), 'junction-sqlite-contract-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
let n = 0

describeStoreContract('sqlite', async () => createSqliteStore(join(dir, `t${++n}.db`)))

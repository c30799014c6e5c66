import { afterAll, beforeAll } from 'vitest'
import { createPostgresStore } from '../../../src/store/postgres.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { createTestDatabase, type TestDatabase } from '../../support/postgres.ts'

// The one store contract against a real PostgreSQL: one fresh database for this file (the contract's
// ids are random per test), dropped afterwards.
let db: TestDatabase
beforeAll(async () => {
  db = await createTestDatabase()
})
afterAll(() => db?.drop())

describeStoreContract('postgres', () => createPostgresStore(db.url, {}))

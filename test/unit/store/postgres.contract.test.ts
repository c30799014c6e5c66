import { createPostgresStore } from '../../../src/store/postgres.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { useTestDatabase } from '../../support/postgres.ts'

// The one store contract against a real PostgreSQL: one fresh database for this file (the contract's
// ids are random per test), dropped afterwards.
const database = useTestDatabase()

describeStoreContract('postgres', async () => createPostgresStore((await database()).url, {}))

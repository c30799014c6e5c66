import pg from 'pg'
import { createPostgresStore } from '../../../src/store/postgres/index.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { describeTaskStoreContract } from '../../contract/tasks.ts'
import { useTestDatabase } from '../../support/postgres.ts'

// The one store contract against a real PostgreSQL: one fresh database for this file (the contract's
// ids are random per test), dropped afterwards.
const database = useTestDatabase()

describeStoreContract('postgres', async () => createPostgresStore((await database()).url, {}))

// The prediction stores claim and sweep across all rows, so each of their tests starts from empty
// prediction tables (the tests of this file run one after another). `another` is a second gateway
// instance on the same database.
describeTaskStoreContract(
  'postgres',
  async () => {
    const { url } = await database()
    const store = await createPostgresStore(url, {})
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    try {
      await client.query('TRUNCATE tasks, task_keys, task_outputs, webhook_deliveries, secrets')
    } finally {
      await client.end()
    }
    return { store, another: () => createPostgresStore(url, {}) }
  },
  { shared: true },
)

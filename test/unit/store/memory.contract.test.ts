import { createMemoryStore } from '../../../src/store/memory/index.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { describeTaskStoreContract } from '../../contract/tasks.ts'

describeStoreContract('memory', async () => createMemoryStore())
describeTaskStoreContract('memory', async () => ({ store: createMemoryStore() }))

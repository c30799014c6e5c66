import { createMemoryStore } from '../../../src/store/memory.ts'
import { describeStoreContract } from '../../contract/store.ts'
import { describeTaskStoreContract } from '../../contract/tasks.ts'

describeStoreContract('memory', async () => createMemoryStore())
describeTaskStoreContract('memory', async () => ({ store: createMemoryStore() }))

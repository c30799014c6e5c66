import { createMemoryStore } from '../../../src/store/memory.ts'
import { describeStoreContract } from '../../contract/store.ts'

describeStoreContract('memory', async () => createMemoryStore())

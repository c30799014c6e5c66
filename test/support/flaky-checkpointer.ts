import { existsSync, writeFileSync } from 'node:fs'
import { workerData } from 'node:worker_threads'

// A checkpoint thread that dies the first time it is started on a file (as on a full disk) and works
// from then on: the SQLite store must start it again (test/unit/store/sqlite.test.ts).
const marker = `${(workerData as { path: string }).path}.checkpointer-died`
if (!existsSync(marker)) {
  writeFileSync(marker, '')
  throw new Error('the checkpointer broke')
}
await import('../../src/store/sqlite/checkpointer.ts')

import { flushCompileCache } from 'node:module'
import { parentPort } from 'node:worker_threads'
import { collectStartupGarbage } from '../startup-gc.ts'
import { countTokens, loadCounter } from './tokens.ts'

// The counting thread (token-thread.ts starts it): o200k_base's tables live here, not on the event
// loop's heap, and a long count never holds the loop. A message is [id, text]; the answer is
// [id, tokens] or [id, null, message] when counting failed.

// Into the compile cache now (src/start.mjs): this thread is ended by terminate(), which writes nothing.
flushCompileCache()

const port = parentPort
if (!port) throw new Error('token-worker runs as a worker thread')
// The encoding first, then one memory-reducing collection: loading it leaves garbage and a grown young
// generation that the thread would otherwise keep while it lives (a process running only this thread:
// 126 MB with the encoding loaded, 109 MB after the collection, which takes ≈0.1 s here, off the event
// loop). Messages that came meanwhile wait on the port. A failed load is each count's error, as before.
await loadCounter().then(collectStartupGarbage, () => undefined)
port.on('message', ([id, text]: [number, string]) => {
  countTokens(text).then(
    (tokens) => port.postMessage([id, tokens]),
    (err: unknown) => port.postMessage([id, null, err instanceof Error ? err.message : String(err)]),
  )
})

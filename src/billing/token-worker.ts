import { flushCompileCache } from 'node:module'
import { parentPort } from 'node:worker_threads'
import { countTokens } from './tokens.ts'

// The counting thread (token-thread.ts starts it): o200k_base's tables live here, not on the event
// loop's heap, and a long count never holds the loop. A message is [id, text]; the answer is
// [id, tokens] or [id, null, message] when counting failed.

// Into the compile cache now (src/start.mjs): this thread is ended by terminate(), which writes nothing.
flushCompileCache()

const port = parentPort
if (!port) throw new Error('token-worker runs as a worker thread')
port.on('message', ([id, text]: [number, string]) => {
  countTokens(text).then(
    (tokens) => port.postMessage([id, tokens]),
    (err: unknown) => port.postMessage([id, null, err instanceof Error ? err.message : String(err)]),
  )
})

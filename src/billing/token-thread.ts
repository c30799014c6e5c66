import { Worker } from 'node:worker_threads'
import type { TokenCounter } from './tokens.ts'

// Usage estimates (a cancelled or cut stream, an upstream that reported no usage) count tokens with
// o200k_base, whose tables take ≈70 MB of heap and ≈0.2 s to load. Most gateways rarely need it, so it
// is loaded in a thread of its own, started on the first count and ended after IDLE_MS without one:
// a gateway at rest does not carry the tables, and neither loading nor a long count holds the event
// loop. A count that the thread cannot answer (it failed or died) rejects; callers bill bytes/4 then.

/** How long the counting thread stays up after its last count. */
export const IDLE_MS = 60_000

export interface TokenThread {
  count: TokenCounter
  /** Ends the thread (if running); later counts start a new one. */
  close(): Promise<void>
}

export interface TokenThreadOptions {
  /** How long the thread stays up after its last count (IDLE_MS). */
  idleMs?: number
  /** Told when the thread has ended for being idle (tests). */
  onIdleExit?: () => void
}

export function createTokenThread(options: TokenThreadOptions = {}): TokenThread {
  const idleMs = options.idleMs ?? IDLE_MS
  let worker: Worker | undefined
  let idleTimer: NodeJS.Timeout | undefined
  let nextId = 0
  const pending = new Map<number, { resolve: (n: number) => void; reject: (err: Error) => void }>()

  const stop = (): Promise<void> => {
    const w = worker
    worker = undefined
    clearTimeout(idleTimer)
    return w ? w.terminate().then(() => undefined) : Promise.resolve()
  }
  const failAll = (err: Error): void => {
    for (const p of pending.values()) p.reject(err)
    pending.clear()
  }
  const start = (): Worker => {
    const w = new Worker(new URL('./token-worker.ts', import.meta.url))
    w.on('message', ([id, tokens, error]: [number, number | null, string?]) => {
      const p = pending.get(id)
      if (!p) return
      pending.delete(id)
      if (tokens === null) p.reject(new Error(`token count failed: ${error}`))
      else p.resolve(tokens)
      if (pending.size === 0 && worker === w) {
        // Waiting for nothing, the thread must not hold the process; it ends after idleMs.
        w.unref()
        idleTimer = setTimeout(() => void stop().then(options.onIdleExit), idleMs)
        idleTimer.unref()
      }
    })
    const lost = (err: Error): void => {
      if (worker !== w) return
      worker = undefined
      clearTimeout(idleTimer)
      failAll(err)
    }
    w.on('error', lost)
    w.on('exit', (code) => lost(new Error(`the token counting thread exited (code ${code})`)))
    return w
  }

  return {
    count(text) {
      return new Promise<number>((resolve, reject) => {
        worker ??= start()
        clearTimeout(idleTimer)
        worker.ref()
        const id = ++nextId
        pending.set(id, { resolve, reject })
        worker.postMessage([id, text])
      })
    },
    async close() {
      failAll(new Error('the token counting thread is closed'))
      await stop()
    },
  }
}

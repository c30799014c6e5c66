import { copyLookup } from './copies.ts'
import { Worker } from 'node:worker_threads'
import { GatewayError } from '../errors.ts'
import type { SqliteWorkerData, WorkerReply, WorkerRequest, WireError } from './sqlite-worker.ts'
import {
  FALLBACK_CHECKPOINT_PAGES,
  KEY_CACHE,
  openSqliteDatabase,
  SETTLED_AS_GIVEN,
  startCheckpointer,
  type SqliteStoreOptions,
} from './sqlite.ts'
import type { GenerationRecord, KeyLookup, Store } from './types.ts'

// The SQLite store as the event loop sees it. Every statement runs in one database thread
// (sqlite-worker.ts, with sqlite.ts's store on its own connection), so a disk that stalls blocks that
// thread, never the event loop: `/healthz` and everything not waiting on the database go on.
//
// Calls travel in batches, one message each way: the calls of one turn of the event loop form a batch.
// Up to MAX_BATCHES_IN_FLIGHT (2) batches are in the thread at once, so the calls of the next turn need
// not wait a whole round trip behind the batch being run; past that the next batch gathers every call
// made meanwhile. The thread answers in order, and a call that depends on another's answer is only made
// once it has it, so a batch sent early changes no outcome.
// The thread runs a batch's writes as one group commit, as before (sqlite.ts). At low load a call
// waits one round trip; under load the batches grow instead of the messages multiplying (a message
// costs the event loop a thread wake-up and a copy: one per request measurably cut throughput).
// A call waits at most `timeoutMs` from when it was made: then its caller gets 503 `store_unavailable`,
// and the thread neither begins nor commits it later (its batch carries the deadline).
//
// API-key lookups, which every request makes, are answered here from a cache of the accounts the
// thread returned, like sqlite.ts's own: cleared when the thread's cache was (a change to accounts or
// keys through this store, or another connection's commit), and re-validated by the thread at most
// every `keyCacheCheckMs`.

interface PendingCall {
  ns: string
  method: string
  args: unknown[]
  resolve: (value: unknown) => void
  reject: (err: unknown) => void
  /** performance.now() when it was made. */
  since: number
}

const fromWire = (e: WireError): Error =>
  e.code !== undefined
    ? new GatewayError(e.code, e.message, {
        param: e.param ?? undefined,
        headers: e.headers,
        retryable: e.retryable,
        ...(e.cause === undefined ? {} : { cause: new Error(e.cause) }),
      })
    : Object.assign(new Error(e.message), e.name === 'Error' ? {} : { name: e.name })

/** Batches sent to the thread before the first is answered (SqliteStoreOptions.maxBatchesInFlight). */
export const MAX_BATCHES_IN_FLIGHT = 2

export function createSqliteStore(path: string, options: SqliteStoreOptions = {}): Store {
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000
  const timeoutMs = options.timeoutMs ?? 5000
  // Created and migrated here, once, at start: a database newer than this gateway fails the start.
  openSqliteDatabase(path, busyTimeoutMs).close()
  const checkpointing = path !== ':memory:' && (options.checkpointIntervalMs ?? 250) > 0
  const data: SqliteWorkerData = {
    path,
    retentionDays: options.retentionDays,
    busyTimeoutMs,
    autoCheckpointPages: checkpointing ? FALLBACK_CHECKPOINT_PAGES : undefined,
    stallGate: options.stallGate,
  }

  let closing = false
  /** Set while the thread is gone (it died; it is started again after a backoff). */
  let dead: Error | undefined
  let restarts = 0
  let restartTimer: NodeJS.Timeout | undefined
  let queue: PendingCall[] = []
  let scheduled = false
  let nextId = 0
  /** The batches in the thread, by id (at most `maxInFlight`). */
  const inFlight = new Map<number, { calls: PendingCall[]; timer: NodeJS.Timeout }>()
  const maxInFlight = Math.max(1, options.maxBatchesInFlight ?? MAX_BATCHES_IN_FLIGHT)
  /** Told when nothing is queued or in the thread (close waits for it). */
  let onIdle: (() => void) | undefined
  const unavailable = (message: string, cause?: unknown): GatewayError =>
    new GatewayError('store_unavailable', message, cause === undefined ? {} : { cause })

  // The thread's key-cache generation, and the accounts of keys it returned since.
  let knownEpoch = 0
  const keyCache = new Map<string, KeyLookup>()
  const keyCacheCheckMs = options.keyCacheCheckMs ?? 1_000
  let checkedAt = Number.NEGATIVE_INFINITY

  const schedule = (): void => {
    if (scheduled) return
    scheduled = true
    // Not at once: calls made by the continuations of those just answered join this batch.
    setImmediate(send)
  }
  const settled = (): void => {
    if (queue.length > 0) schedule()
    else if (inFlight.size === 0) onIdle?.()
  }

  const send = (): void => {
    scheduled = false
    if (inFlight.size >= maxInFlight || queue.length === 0) return
    const calls = queue
    queue = []
    if (dead) {
      for (const c of calls) c.reject(unavailable('the state store is unavailable', dead))
      settled()
      return
    }
    // The batch is due when its oldest call is.
    const remainingMs = calls[0]!.since + timeoutMs - performance.now()
    if (remainingMs <= 0) {
      for (const c of calls) c.reject(unavailable(`the state store did not answer within ${timeoutMs} ms`))
      settled()
      return
    }
    const id = ++nextId
    const timer = setTimeout(
      () => {
        if (!inFlight.delete(id)) return
        const err = unavailable(`the state store did not answer within ${timeoutMs} ms`)
        for (const c of calls) c.reject(err)
        settled()
      },
      Math.max(0, remainingMs),
    )
    inFlight.set(id, { calls, timer })
    const message: WorkerRequest = {
      type: 'batch',
      id,
      deadline: Date.now() + remainingMs,
      calls: calls.map((c) => [c.ns, c.method, c.args]),
    }
    try {
      worker.postMessage(message)
      options.onBatch?.(calls.length)
    } catch (err) {
      // An argument that cannot be copied to the thread (a programming error): fail each call whose
      // own arguments cannot, send the others.
      inFlight.delete(id)
      clearTimeout(timer)
      const ok: PendingCall[] = []
      for (const c of calls) {
        try {
          structuredClone(c.args)
          ok.push(c)
        } catch {
          c.reject(err)
        }
      }
      if (ok.length === calls.length) {
        for (const c of calls) c.reject(unavailable('the state store is unavailable', err))
      } else {
        queue.unshift(...ok)
      }
      settled()
    }
  }

  const onReply = (reply: WorkerReply): void => {
    if (reply.type !== 'batch') return
    restarts = 0
    if (reply.epoch !== knownEpoch) {
      keyCache.clear()
      knownEpoch = reply.epoch
    }
    // Another id: a batch past its deadline, whose callers were answered already (the thread ran none
    // of it).
    const batch = inFlight.get(reply.id)
    if (!batch) return
    inFlight.delete(reply.id)
    const { calls, timer } = batch
    clearTimeout(timer)
    reply.results.forEach((r, i) => {
      const c = calls[i]!
      if (r.ok) c.resolve(r.value)
      else c.reject(fromWire(r.error))
    })
    settled()
  }

  // The thread should never die (a stalled disk blocks it, it does not kill it); should it all the
  // same, its calls fail with store_unavailable and a new one is started after a backoff (100 ms,
  // doubling up to a minute), rather than leaving the gateway alive but unable to serve.
  let worker: Worker
  const startThread = (): void => {
    restartTimer = undefined
    const w = new Worker(new URL('./sqlite-worker.ts', import.meta.url), {
      workerData: { ...data, autoCheckpointPages } satisfies SqliteWorkerData,
    })
    // Waiting calls keep the process alive by their timers, not by the thread.
    w.unref()
    worker = w
    dead = undefined
    options.onThreadStart?.()
    let gone = false
    const lost = (err: Error): void => {
      if (gone) return
      gone = true
      dead = err
      const lostCalls = [...[...inFlight.values()].flatMap((b) => b.calls), ...queue]
      for (const b of inFlight.values()) clearTimeout(b.timer)
      inFlight.clear()
      queue = []
      for (const c of lostCalls) c.reject(unavailable('the state store is unavailable', err))
      onIdle?.()
      if (closing) return
      void w.terminate()
      // A new thread counts its key-cache generations afresh.
      knownEpoch = -1
      const delay = Math.min(60_000, 100 * 2 ** Math.min(restarts, 16))
      restarts++
      options.onThreadError?.(err, delay)
      restartTimer = setTimeout(startThread, delay)
      restartTimer.unref()
    }
    w.on('message', onReply)
    w.on('error', lost)
    w.on('exit', (code) => lost(new Error(`the database thread exited (code ${code})`)))
  }
  let autoCheckpointPages = data.autoCheckpointPages
  startThread()

  /** Calls `ns.method(...args)` (a top-level method when `ns` is '') in the database thread. */
  const call = (ns: string, method: string, args: unknown[]): Promise<unknown> =>
    new Promise((resolve, reject) => {
      if (closing || dead) {
        reject(unavailable(closing ? 'the state store is closed' : 'the state store is unavailable', dead))
        return
      }
      queue.push({ ns, method, args, resolve, reject, since: performance.now() })
      if (inFlight.size < maxInFlight) schedule()
    })

  const checkpointer = checkpointing
    ? startCheckpointer(path, options, (pages) => {
        autoCheckpointPages = pages
        if (!closing && !dead) worker.postMessage({ type: 'autocheckpoint', pages } satisfies WorkerRequest)
      })
    : undefined

  /** A namespace of the store: `overrides` by name, every other method forwarded to the thread. */
  const forward = <T extends object>(ns: string, overrides: Partial<T> = {}): T =>
    new Proxy(overrides, {
      get(target, name) {
        // Not store calls: what awaiting, printing or serialising an object looks for.
        if (typeof name !== 'string' || name === 'then' || name === 'toJSON') return undefined
        if (name in target) return (target as Record<string, unknown>)[name]
        return (...args: unknown[]) => call(ns, name, args)
      },
    }) as T

  const findKey = async (keyHash: string): Promise<KeyLookup | null> => {
    const sentAt = performance.now()
    const cached = sentAt - checkedAt < keyCacheCheckMs ? keyCache.get(keyHash) : undefined
    if (cached) return copyLookup(cached)
    const r = (await call('accounts', 'findKey', [keyHash])) as {
      found: KeyLookup | null
      epoch: number
    }
    // Read before a change the same reply reports: not worth keeping.
    if (r.epoch !== knownEpoch) return r.found
    checkedAt = Math.max(checkedAt, sentAt)
    if (r.found) {
      if (keyCache.size >= KEY_CACHE) keyCache.clear()
      keyCache.set(keyHash, copyLookup(r.found))
    }
    return r.found
  }
  const accounts = forward<Store['accounts']>('accounts', {
    findKey,
    async findByKeyHash(keyHash) {
      return (await findKey(keyHash))?.account ?? null
    },
  })

  return {
    accounts,
    files: forward('files'),
    ledger: forward<Store['ledger']>('ledger', {
      async settle(ref, input, limit) {
        const charged = await call('ledger', 'settle', [ref, input, limit])
        return charged === SETTLED_AS_GIVEN ? input : (charged as GenerationRecord | null)
      },
    }),
    generations: forward('generations'),
    rateLimits: forward('rateLimits'),
    admission: forward('admission'),
    appliedConfig: forward('appliedConfig'),
    tasks: forward('tasks'),
    outputs: forward('outputs'),
    webhooks: forward('webhooks'),
    responses: forward('responses'),
    secrets: forward<Store['secrets']>('secrets', {
      // A function does not cross threads: the value is made here, and the thread keeps the first.
      async getOrCreate(name, create) {
        const found = (await call('secrets', 'get', [name])) as string | null
        if (found !== null) return found
        return (await call('secrets', 'getOrCreate', [name, create()])) as string
      },
    }),
    async ping() {
      await call('', 'ping', [])
    },
    async sweep(now) {
      await call('', 'sweep', [now])
    },
    async close() {
      if (closing) return
      // The checkpoint thread first: then nothing interleaves between the last commit and the close.
      await checkpointer?.stop()
      clearTimeout(restartTimer)
      closing = true
      // What was asked before is answered (or times out) first.
      if (inFlight.size > 0 || queue.length > 0) await new Promise<void>((resolve) => (onIdle = resolve))
      if (dead) return
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()))
      worker.postMessage({ type: 'close' } satisfies WorkerRequest)
      // A thread stuck on a stalled disk does not hold the shutdown: what it has committed is in the WAL.
      let timer: NodeJS.Timeout | undefined
      const stuck = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), timeoutMs)))
      if (await Promise.race([exited.then(() => false), stuck])) void worker.terminate()
      clearTimeout(timer)
    },
  }
}

import { Worker } from 'node:worker_threads'
import { GatewayError } from '../../errors.ts'
import { copyLookup } from '../copies.ts'
import type { KeyLookup, Store } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import type { CheckpointReport } from './checkpointer.ts'
import { AUTO_CHECKPOINT_PAGES, startCheckpointer } from './checkpoints.ts'
import { openSqliteDatabase } from './database.ts'
import { encodedRecord } from './generations.ts'
import { KEY_CACHE } from './keys.ts'
import {
  fromWire,
  SETTLED_AS_GIVEN,
  type SqliteWorkerData,
  type WorkerReply,
  type WorkerRequest,
} from './wire.ts'

// The SQLite store as the event loop sees it. Every statement runs in one database thread
// (worker.ts, with index.ts's store on its own connection), so a disk that stalls blocks that
// thread, never the event loop: `/healthz` and everything not waiting on the database go on.
//
// Calls travel in batches, one message each way: the calls of one turn of the event loop form a batch.
// Up to MAX_BATCHES_IN_FLIGHT (2) batches are in the thread at once, so the calls of the next turn need
// not wait a whole round trip behind the batch being run; past that the next batch gathers every call
// made meanwhile. The thread answers in order, and a call that depends on another's answer is only made
// once it has it, so a batch sent early changes no outcome.
// The thread runs a batch's writes as one group commit, as before (commit.ts). At low load a call
// waits one round trip; under load the batches grow instead of the messages multiplying (a message
// costs the event loop a thread wake-up and a copy: one per request measurably cut throughput).
// A call waits at most `timeoutMs` from when it was made: then its caller gets 503 `store_unavailable`,
// and the thread neither begins nor commits it later (its batch carries the deadline).
//
// API-key lookups, which every request makes, are answered here from a cache of the accounts the
// thread returned, like keys.ts's own: cleared when the thread's cache was (a change to accounts or
// keys through this store, or another connection's commit), and re-validated by the thread at most
// every `keyCacheCheckMs`.
//
// The pieces: the batches (createBatches), the thread and its restarts (startDatabaseThread), the key
// cache (createThreadKeyCache), and the Store forwarding to them (storeOverThread).

export interface SqliteStoreOptions {
  /** Generation records older than this many days are deleted by `sweep`; usage totals stay. */
  retentionDays?: number
  /** How long a statement waits for another process's write lock before failing (default 5000). */
  busyTimeoutMs?: number
  /**
   * How often the API-key lookup asks whether another process changed the file (default 1000 ms): a key
   * revoked or an account changed through another process takes effect here within this time.
   */
  keyCacheCheckMs?: number
  /**
   * How often a worker thread checkpoints the WAL into the database file (default 250 ms); 0 leaves it to
   * SQLite's automatic checkpoint, inside the database thread's commits.
   */
  checkpointIntervalMs?: number
  /** Told of each checkpoint the worker thread made (tests, diagnostics). */
  onCheckpoint?: (report: CheckpointReport) => void
  /**
   * Told when the checkpoint thread failed; checkpoints then happen inside commits again until it is
   * restarted, `restartInMs` later.
   */
  onCheckpointerError?: (err: unknown, restartInMs: number) => void
  /** Told when the checkpoint thread is started the first time (`checkpointerStartBatches`). */
  onCheckpointerStart?: () => void
  /** Told when the checkpoint thread was started again after a failure. */
  onCheckpointerRestart?: () => void
  /** The first delay before restarting a failed checkpoint thread (default 1000 ms), doubling to 60 s. */
  checkpointerRestartMs?: number
  /**
   * Batches answered by the database thread before the checkpoint thread is started (default 100,
   * CHECKPOINTER_START_BATCHES in checkpoints.ts); 0 starts it with the store.
   */
  checkpointerStartBatches?: number
  /** The checkpoint thread's script (tests give one that fails); checkpointer.ts by default. */
  checkpointerScript?: URL
  /**
   * How long a call waits for the database thread (default 5000 ms) before failing with 503
   * `store_unavailable`. A call not yet begun by then is never run; a commit is not begun after it.
   */
  timeoutMs?: number
  /** Batches of calls sent to the database thread before the first is answered (default 2). */
  maxBatchesInFlight?: number
  /** Told of each message sent to the database thread, with the number of calls it carries. */
  onBatch?: (calls: number) => void
  /** Told when the database thread died (it is started again `restartInMs` later). */
  onThreadError?: (err: unknown, restartInMs: number) => void
  /** Told each time a database thread is started (the first, and each restart). */
  onThreadStart?: () => void
  /**
   * Tests: while `stallGate[0]` is 1 the database thread blocks before each batch, as on a stalled disk
   * (set it back to 0 and `Atomics.notify` it to resume); at 2 the thread exits instead (a crash).
   */
  stallGate?: Int32Array
}

/** Batches sent to the thread before the first is answered (SqliteStoreOptions.maxBatchesInFlight). */
export const MAX_BATCHES_IN_FLIGHT = 2

export function createSqliteStore(path: string, options: SqliteStoreOptions = {}): Store {
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000
  // Created and migrated here, once, at start: a database newer than this gateway fails the start.
  openSqliteDatabase(path, busyTimeoutMs).close()
  const checkpointing = path !== ':memory:' && (options.checkpointIntervalMs ?? 250) > 0
  const data: SqliteWorkerData = {
    path,
    retentionDays: options.retentionDays,
    busyTimeoutMs,
    // SQLite's own threshold until the checkpoint thread starts (it sets the fallback's).
    autoCheckpointPages: checkpointing ? AUTO_CHECKPOINT_PAGES : undefined,
    stallGate: options.stallGate,
  }
  const keys = createThreadKeyCache(options.keyCacheCheckMs ?? 1_000)
  // Replies come asynchronously: checkpointer is set by then.
  const thread = startDatabaseThread(data, options, keys, () => checkpointer?.sawBatch())
  const checkpointer = checkpointing
    ? startCheckpointer(path, options, (pages) => thread.setAutoCheckpoint(pages))
    : undefined
  return storeOverThread(thread, keys, async () => {
    await checkpointer?.stop()
  })
}

interface PendingCall {
  ns: string
  method: string
  args: unknown[]
  resolve: (value: unknown) => void
  reject: (err: unknown) => void
  /** performance.now() when it was made. */
  since: number
}

const unavailable = (message: string, cause?: unknown): GatewayError =>
  new GatewayError('store_unavailable', message, cause === undefined ? {} : { cause })

/** The calls waiting to be sent and the batches in the thread. */
interface Batches {
  add(call: PendingCall): void
  /** Answers the batch `reply` is for. */
  answer(reply: WorkerReply): void
  /** The thread is gone: every call waiting or in it fails, with an error of `lost`'s making. */
  failAll(lost: () => unknown): void
  /** Resolves when nothing is queued or in the thread. */
  idle(): Promise<void>
}

function createBatches(
  post: (message: WorkerRequest) => void,
  dead: () => Error | undefined,
  options: SqliteStoreOptions,
): Batches {
  const timeoutMs = options.timeoutMs ?? 5000
  const maxInFlight = Math.max(1, options.maxBatchesInFlight ?? MAX_BATCHES_IN_FLIGHT)
  let queue: PendingCall[] = []
  let scheduled = false
  let nextId = 0
  /** The batches in the thread, by id (at most `maxInFlight`). */
  const inFlight = new Map<number, { calls: PendingCall[]; timer: NodeJS.Timeout }>()
  /** Told when nothing is queued or in the thread (close waits for it). */
  let onIdle: (() => void) | undefined

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
    const gone = dead()
    if (gone) {
      for (const c of calls) c.reject(unavailable('the state store is unavailable', gone))
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
      post(message)
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

  return {
    add(call) {
      queue.push(call)
      if (inFlight.size < maxInFlight) schedule()
    },
    answer(reply) {
      // Another id: a batch past its deadline, whose callers were answered already (the thread ran
      // none of it).
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
    },
    failAll(lost) {
      const lostCalls = [...[...inFlight.values()].flatMap((b) => b.calls), ...queue]
      for (const b of inFlight.values()) clearTimeout(b.timer)
      inFlight.clear()
      queue = []
      for (const c of lostCalls) c.reject(lost())
      onIdle?.()
    },
    async idle() {
      if (inFlight.size > 0 || queue.length > 0) await new Promise<void>((resolve) => (onIdle = resolve))
    },
  }
}

/** The database thread as the store's side sees it. */
interface DatabaseThread {
  /** Calls `ns.method(...args)` (a top-level method when `ns` is '') in the database thread. */
  call(ns: string, method: string, args: unknown[]): Promise<unknown>
  /** SQLite's automatic checkpoint threshold, told to this thread and to any started later. */
  setAutoCheckpoint(pages: number): void
  closing(): boolean
  /** Waits for what was asked, then stops the thread (not waiting past `timeoutMs` for it). */
  close(): Promise<void>
}

// The thread should never die (a stalled disk blocks it, it does not kill it); should it all the
// same, its calls fail with store_unavailable and a new one is started after a backoff (100 ms,
// doubling up to a minute), rather than leaving the gateway alive but unable to serve.
function startDatabaseThread(
  data: SqliteWorkerData,
  options: SqliteStoreOptions,
  keys: ThreadKeyCache,
  /** Told of each batch the thread answered. */
  answered: () => void,
): DatabaseThread {
  const timeoutMs = options.timeoutMs ?? 5000
  let closing = false
  /** Set while the thread is gone (it died; it is started again after a backoff). */
  let dead: Error | undefined
  let restarts = 0
  let restartTimer: NodeJS.Timeout | undefined
  let autoCheckpointPages = data.autoCheckpointPages
  let worker: Worker
  const batches = createBatches(
    (message) => worker.postMessage(message),
    () => dead,
    options,
  )

  const onReply = (reply: WorkerReply): void => {
    if (reply.type !== 'batch') return
    restarts = 0
    keys.sawEpoch(reply.epoch)
    batches.answer(reply)
    answered()
  }
  const startThread = (): void => {
    restartTimer = undefined
    const w = new Worker(new URL('./worker.ts', import.meta.url), {
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
      batches.failAll(() => unavailable('the state store is unavailable', err))
      if (closing) return
      void w.terminate()
      // A new thread counts its key-cache generations afresh.
      keys.forgetEpoch()
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
  startThread()

  return {
    call: (ns, method, args) =>
      new Promise((resolve, reject) => {
        if (closing || dead) {
          reject(unavailable(closing ? 'the state store is closed' : 'the state store is unavailable', dead))
          return
        }
        batches.add({ ns, method, args, resolve, reject, since: performance.now() })
      }),
    setAutoCheckpoint(pages) {
      autoCheckpointPages = pages
      if (!closing && !dead) worker.postMessage({ type: 'autocheckpoint', pages } satisfies WorkerRequest)
    },
    closing: () => closing,
    async close() {
      clearTimeout(restartTimer)
      closing = true
      // What was asked before is answered (or times out) first.
      await batches.idle()
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

/** The thread's key-cache generation, and the accounts of keys it returned since. */
interface ThreadKeyCache {
  /** A reply's generation: the cache is cleared when it moved. */
  sawEpoch(epoch: number): void
  /** A new thread counts its generations afresh. */
  forgetEpoch(): void
  findKey(keyHash: string, call: DatabaseThread['call']): Promise<KeyLookup | null>
}

function createThreadKeyCache(keyCacheCheckMs: number): ThreadKeyCache {
  let knownEpoch = 0
  const keyCache = new Map<string, KeyLookup>()
  let checkedAt = Number.NEGATIVE_INFINITY
  return {
    sawEpoch(epoch) {
      if (epoch !== knownEpoch) {
        keyCache.clear()
        knownEpoch = epoch
      }
    },
    forgetEpoch() {
      knownEpoch = -1
    },
    async findKey(keyHash, call) {
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
    },
  }
}

/** The Store: every method forwarded to the thread, but for the few answered or prepared here. */
function storeOverThread(
  thread: DatabaseThread,
  keys: ThreadKeyCache,
  stopCheckpointer: () => Promise<void>,
): Store {
  const { call } = thread
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
  const findKey = (keyHash: string): Promise<KeyLookup | null> => keys.findKey(keyHash, call)

  return {
    accounts: forward<Store['accounts']>('accounts', {
      findKey,
      async findByKeyHash(keyHash) {
        return (await findKey(keyHash))?.account ?? null
      },
    }),
    files: forward('files'),
    ledger: forward<Store['ledger']>('ledger', {
      async settle(ref, input, limit) {
        // The record goes as its stored text (generations.ts, EncodedRecord).
        const charged = await call('ledger', 'settleEncoded', [ref, encodedRecord(input), limit])
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
      if (thread.closing()) return
      // The checkpoint thread first: then nothing interleaves between the last commit and the close.
      await stopCheckpointer()
      await thread.close()
    },
  }
}

import { flushCompileCache } from 'node:module'
import { parentPort, workerData } from 'node:worker_threads'
import { GatewayError } from '../../errors.ts'
import { collectStartupGarbage } from '../../startup-gc.ts'
import { openSqliteStore, type SqliteEngine } from './index.ts'
import {
  SETTLED_AS_GIVEN,
  toWire,
  type SqliteWorkerData,
  type WorkerReply,
  type WorkerRequest,
} from './wire.ts'

// The database thread of the SQLite store (thread.ts starts it): index.ts's store on this
// thread's connection. A message is the calls of one turn of the event loop; their writes join the
// next group commit (with those of any other message already waiting here), and the answers go back in
// one message once they all settled.

const port = parentPort
if (!port) throw new Error('sqlite-worker runs as a worker thread')
const data = workerData as SqliteWorkerData
// The event loop's side caches API-key lookups and decides when to re-validate: here every lookup
// reads data_version.
const store = openSqliteStore(data.path, {
  retentionDays: data.retentionDays,
  busyTimeoutMs: data.busyTimeoutMs,
  keyCacheCheckMs: 0,
  autoCheckpointPages: data.autoCheckpointPages,
})
// This thread's modules into the compile cache now (when it is on, src/start.mjs): a thread ended by
// terminate() or by the process's exit writes nothing there by itself.
flushCompileCache()
// Loading this thread's modules grew its young generation: given back before the first message.
collectStartupGarbage()

/** A value that cannot be copied to the other thread fails its own call, not the thread. */
function cloneable(result: WorkerReply['results'][number]): WorkerReply['results'][number] {
  if (!result.ok) return result
  try {
    structuredClone(result.value)
    return result
  } catch (err) {
    return { ok: false, error: toWire(err) }
  }
}

/** Starts one call; what it returns synchronously (a read) has run when this returns. */
function start(engine: SqliteEngine, ns: string, method: string, args: unknown[]): Promise<unknown> {
  try {
    const target = (ns === '' ? engine : engine[ns as keyof SqliteEngine]) as unknown as Record<
      string,
      ((...a: unknown[]) => Promise<unknown>) | undefined
    >
    const fn = target?.[method]
    if (typeof fn !== 'function') throw new Error(`unknown store call ${ns}.${method}`)
    if (ns === 'secrets' && method === 'getOrCreate') {
      const value = args[1] as string
      return fn.call(target, args[0], () => value)
    }
    const result = fn.apply(target, args)
    // A settlement charged as given (the common case) answers so, rather than copying the record back.
    if (ns === 'ledger' && method === 'settleEncoded') {
      return result.then((charged) => (charged === args[1] ? SETTLED_AS_GIVEN : charged))
    }
    // A key lookup says which cache generation it read in, for the event loop's cache.
    if (ns === 'accounts' && method === 'findKey') {
      const epoch = engine.cacheEpoch()
      return result.then((found) => ({ found, epoch }))
    }
    return result
  } catch (err) {
    return Promise.reject(err)
  }
}

port.on('message', (m: WorkerRequest) => {
  if (m.type === 'autocheckpoint') {
    store.setAutoCheckpoint(m.pages)
    return
  }
  if (m.type === 'close') {
    void store.close().finally(() => port.close())
    return
  }
  const gate = data.stallGate
  if (gate) {
    while (Atomics.load(gate, 0) === 1) Atomics.wait(gate, 0, 1)
    if (Atomics.load(gate, 0) === 2) process.exit(1)
  }
  let pending: Promise<unknown>[]
  if (Date.now() > m.deadline) {
    // Its caller stopped waiting: nothing of it runs.
    const late = new GatewayError('store_unavailable', 'the state store did not answer in time')
    pending = m.calls.map(() => Promise.reject(late))
  } else {
    store.setDeadline(m.deadline)
    pending = m.calls.map(([ns, method, args]) => start(store, ns, method, args))
    store.setDeadline(Number.POSITIVE_INFINITY)
  }
  void Promise.allSettled(pending).then((settled) => {
    const reply: WorkerReply = {
      type: 'batch',
      id: m.id,
      epoch: store.cacheEpoch(),
      results: settled.map((s) =>
        s.status === 'fulfilled' ? { ok: true, value: s.value } : { ok: false, error: toWire(s.reason) },
      ),
    }
    try {
      port.postMessage(reply)
    } catch {
      port.postMessage({ ...reply, results: reply.results.map(cloneable) })
    }
  })
})

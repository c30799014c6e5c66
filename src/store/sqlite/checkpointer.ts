import { flushCompileCache } from 'node:module'
import { DatabaseSync } from 'node:sqlite'
import { parentPort, workerData } from 'node:worker_threads'

// The SQLite store's checkpointer, in a worker thread with its own connection to the file. A WAL
// checkpoint copies the pages committed since the last one into the database file and syncs both files
// to disk: hundreds of microseconds to milliseconds, which SQLite's automatic checkpoint would spend on
// the event loop inside whichever commit crosses the threshold. Here it runs beside the event loop
// (PASSIVE: it never waits for the writer and never makes it wait). The store's own connection keeps
// an automatic checkpoint at a far larger threshold, as a fallback should this thread stop.

export interface CheckpointerData {
  path: string
  /** How often to checkpoint. */
  intervalMs: number
  busyTimeoutMs: number
}

/** What the checkpointer posts after each checkpoint: SQLite's own figures, in WAL frames. */
export interface CheckpointReport {
  type: 'checkpoint'
  /** 1 when another connection held the checkpoint lock (nothing was done this time). */
  busy: number
  /** Frames in the WAL. */
  log: number
  /** Frames copied into the database file so far. */
  checkpointed: number
}

const { path, intervalMs, busyTimeoutMs } = workerData as CheckpointerData
const port = parentPort
if (!port) throw new Error('sqlite-checkpointer runs as a worker thread')

// Into the compile cache now (src/start.mjs): a thread ended with the process writes nothing there.
flushCompileCache()

const db = new DatabaseSync(path, { timeout: busyTimeoutMs })
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)')
let lastLog = -1

const timer = setInterval(() => {
  const r = checkpoint.get() as { busy: number; log: number; checkpointed: number }
  // An idle database reports the same WAL every time: only a change is worth a message.
  if (r.log === lastLog && r.busy === 0) return
  lastLog = r.log
  const report: CheckpointReport = {
    type: 'checkpoint',
    busy: r.busy,
    log: r.log,
    checkpointed: r.checkpointed,
  }
  port.postMessage(report)
}, intervalMs)

port.on('message', (message: unknown) => {
  if (message !== 'stop') return
  clearInterval(timer)
  db.close()
  port.close()
})

import { Worker } from 'node:worker_threads'
import type { CheckpointerData, CheckpointReport } from './checkpointer.ts'
import type { SqliteStoreOptions } from './thread.ts'

// Starting the checkpoint thread (checkpointer.ts) from the event loop's side, and again after it failed.

/** SQLite's own automatic checkpoint threshold, in WAL pages (its default). */
export const AUTO_CHECKPOINT_PAGES = 1_000
/** The automatic checkpoint's threshold while the worker thread checkpoints: only a fallback. */
export const FALLBACK_CHECKPOINT_PAGES = 10_000
/**
 * Batches the database thread answers before the checkpoint thread is started. A thread costs ≈12 MB of
 * resident memory, which a gateway at rest, or one that has served a few requests since its start,
 * does not need: until then SQLite's own automatic checkpoint (AUTO_CHECKPOINT_PAGES) stands in, and
 * a hundred batches write well under its thousand pages, so it seldom runs.
 */
export const CHECKPOINTER_START_BATCHES = 100

/**
 * Moves WAL checkpoints out of the database thread's commits (see checkpointer.ts): SQLite's automatic
 * checkpoint, which the commit that crosses its threshold runs (≈0.4 ms on average per group commit
 * here, some over 10 ms), becomes a fallback at a ten times larger threshold. The thread is started by
 * the `checkpointerStartBatches`th batch answered (`sawBatch`), not at once; once started it stays.
 * Should it fail (it did on a full disk), the automatic checkpoint is set back to SQLite's default and
 * the thread is started again after a backoff (`checkpointerRestartMs`, doubling up to a minute; back
 * to the first after a checkpoint succeeds).
 */
export function startCheckpointer(
  path: string,
  options: SqliteStoreOptions,
  setAutoCheckpoint: (pages: number) => void,
): { sawBatch: () => void; stop: () => Promise<void> } | undefined {
  const intervalMs = options.checkpointIntervalMs ?? 250
  if (intervalMs <= 0) return undefined
  const data: CheckpointerData = { path, intervalMs, busyTimeoutMs: options.busyTimeoutMs ?? 5000 }
  const script = options.checkpointerScript ?? new URL('./checkpointer.ts', import.meta.url)
  const firstDelayMs = options.checkpointerRestartMs ?? 1000
  let stopping = false
  let failures = 0
  let restartTimer: NodeJS.Timeout | undefined
  let exited: Promise<void> = Promise.resolve()
  let worker: Worker | undefined
  let batchesToStart = options.checkpointerStartBatches ?? CHECKPOINTER_START_BATCHES

  const start = (): void => {
    restartTimer = undefined
    if (stopping) return
    const w = new Worker(script, { workerData: data })
    worker = w
    w.unref()
    setAutoCheckpoint(FALLBACK_CHECKPOINT_PAGES)
    let failed = false
    const fail = (err: unknown): void => {
      if (failed || stopping) return
      failed = true
      void w.terminate()
      setAutoCheckpoint(AUTO_CHECKPOINT_PAGES)
      const delay = Math.min(60_000, firstDelayMs * 2 ** Math.min(failures, 16))
      failures++
      options.onCheckpointerError?.(err, delay)
      restartTimer = setTimeout(() => {
        start()
        options.onCheckpointerRestart?.()
      }, delay)
      restartTimer.unref()
    }
    w.on('message', (m: CheckpointReport) => {
      failures = 0
      options.onCheckpoint?.(m)
    })
    w.on('error', fail)
    w.on('exit', (code) => fail(new Error(`the checkpoint thread exited with code ${code}`)))
    exited = new Promise<void>((resolve) => w.once('exit', () => resolve()))
  }
  const firstStart = (): void => {
    start()
    options.onCheckpointerStart?.()
  }
  if (batchesToStart <= 0) firstStart()
  return {
    sawBatch: () => {
      if (batchesToStart > 0 && --batchesToStart === 0) firstStart()
    },
    stop: async () => {
      stopping = true
      clearTimeout(restartTimer)
      worker?.postMessage('stop')
      await exited
    },
  }
}

import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Worker } from 'node:worker_threads'

// Fills Node's compile cache (the directory NODE_COMPILE_CACHE names, which this script must be run
// with) with every module the gateway loads: the event loop's and each worker thread's. Node runs the
// TypeScript sources by stripping their types with a WebAssembly build of a compiler, loaded into every
// thread that strips a file (≈18 MB of RSS per thread, kept for the thread's life); a module found in
// the cache is neither stripped nor compiled again, so a gateway started with the cache filled never
// loads that compiler (idle RSS 160 → 125 MB on SQLite). The image runs this at build time
// (Dockerfile); a cache entry is keyed by the file's contents, so a changed file is stripped again.
// Node keeps one cache per user id: run this as the user the gateway runs as.

const root = new URL('../', import.meta.url)
if (!process.env['NODE_COMPILE_CACHE']) {
  console.error('warm-compile-cache: run with NODE_COMPILE_CACHE set to the cache directory')
  process.exit(1)
}

/**
 * An entry point, run until its configuration is refused: its static imports (for src/server.ts, the
 * event loop's whole graph) are all loaded before it reads the (deliberately invalid) port.
 */
function loadEntry(path: string): void {
  const run = spawnSync(process.execPath, ['--disable-warning=ExperimentalWarning', path], {
    cwd: root,
    env: { ...process.env, PORT: 'not-a-port', GATEWAY_CONFIG: '' },
    encoding: 'utf8',
  })
  // Both entries exit 1 on a configuration they refuse; anything else is a failure to load.
  if (run.status !== 1 || /Error \[|SyntaxError|Cannot find/.test(run.stderr))
    throw new Error(`${path} did not stop at its configuration (${run.status}):\n${run.stderr}`)
}

/**
 * A worker thread's script, run until `stop` (a message it ends on) has it exit by itself: a thread
 * ended by terminate() leaves its modules out of the cache.
 */
async function loadWorker(path: string, workerData: unknown, stop: unknown): Promise<void> {
  const w = new Worker(new URL(path, root), { workerData })
  const exited = new Promise<number>((resolve, reject) => {
    w.once('exit', resolve)
    w.once('error', reject)
  })
  w.postMessage(stop)
  await exited
}

loadEntry('src/server.ts')
loadEntry('src/healthcheck.ts')
const dir = mkdtempSync(join(tmpdir(), 'junction-warm-'))
try {
  const path = join(dir, 'warm.db')
  await loadWorker('src/store/sqlite/worker.ts', { path, busyTimeoutMs: 1000 }, { type: 'close' })
  await loadWorker(
    'src/store/sqlite/checkpointer.ts',
    { path, intervalMs: 60_000, busyTimeoutMs: 1000 },
    'stop',
  )
  // The counting thread has no message it ends on: one count, then it is terminated.
  const counter = new Worker(new URL('src/billing/token-worker.ts', root))
  await new Promise((resolve, reject) => {
    counter.once('message', resolve)
    counter.once('error', reject)
    counter.postMessage([1, 'warm'])
  })
  await counter.terminate()
  await import('../src/store/postgres/index.ts')
} finally {
  rmSync(dir, { recursive: true, force: true })
}

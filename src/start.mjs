// The gateway's entry point for `npm start`: turns on Node's compile cache, then loads server.ts.
//
// Node runs the TypeScript sources by stripping their types with a WebAssembly compiler that it loads
// into every thread that strips a file (≈18 MB of RSS each, kept for the thread's life: the event loop,
// the SQLite thread, its checkpoint thread, the token-counting thread). A module found in the compile
// cache is neither stripped nor compiled again, so from the second start on no thread loads that
// compiler. This file is plain JavaScript so that the event loop strips nothing before the cache is on;
// `node src/server.ts` still works, without a cache unless NODE_COMPILE_CACHE is set.
//
// Where: GATEWAY_COMPILE_CACHE (`off` for none), else NODE_COMPILE_CACHE (Node has then already turned
// it on, as in the image), else ./data/compile-cache, beside the default database. The directory is
// created 0700 and used only when it belongs to this user and no one else can write to it: another user
// able to write there could plant code that this process would run. A cache that cannot be used never
// stops the gateway: server.ts logs why at debug level (the logger does not exist yet here).
import { mkdirSync, statSync } from 'node:fs'
import module from 'node:module'
import { dirname, resolve } from 'node:path'
import process from 'node:process'

const DEFAULT_DIR = './data/compile-cache'

/** Why `dir` must not hold this process's cache, or undefined when it may. */
function unsafe(dir) {
  const st = statSync(dir)
  if (!st.isDirectory()) return 'not a directory'
  if (typeof process.getuid === 'function' && st.uid !== process.getuid()) return 'owned by another user'
  if ((st.mode & 0o022) !== 0) return 'writable by other users'
  return undefined
}

/** Turns the cache on in this thread and, through the environment they copy, in the worker threads. */
function enableCompileCache(env) {
  const setting = env.GATEWAY_COMPILE_CACHE
  if (setting === 'off') return { status: 'off' }
  // Node turned it on from NODE_COMPILE_CACHE as it started (unless that came from .env, read later).
  if (!setting && env.NODE_COMPILE_CACHE && module.getCompileCacheDir() !== undefined)
    return { status: 'enabled', directory: module.getCompileCacheDir() }
  const dir = resolve(setting || env.NODE_COMPILE_CACHE || DEFAULT_DIR)
  try {
    // Its parent as any other directory the gateway makes (./data), the cache itself for this user only.
    mkdirSync(dirname(dir), { recursive: true })
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    const why = unsafe(dir)
    if (why !== undefined) return { status: 'failed', directory: dir, message: why }
    const r = module.enableCompileCache(dir)
    if (r.status === module.constants.compileCacheStatus.FAILED)
      return { status: 'failed', directory: dir, message: r.message }
    // Worker threads copy this environment when they are created, and Node turns the cache on in each
    // from it (enableCompileCache() alone covers only this thread).
    env.NODE_COMPILE_CACHE = dir
    return { status: 'enabled', directory: module.getCompileCacheDir() }
  } catch (err) {
    return { status: 'failed', directory: dir, message: err instanceof Error ? err.message : String(err) }
  }
}

globalThis[Symbol.for('junction.compileCache')] = enableCompileCache(process.env)
await import('./server.ts')

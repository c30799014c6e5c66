import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

/**
 * One full garbage collection once start-up is over, before the first request.
 *
 * Loading the modules (and stripping their types) allocates fast enough that V8 grows the young
 * generation to its largest size, and it never gives the pages back by itself while the process is
 * idle: about 25 MB of the idle RSS was young-generation and large-object pages holding nothing. A
 * full collection with the heap nearly empty shrinks the young generation back; under load V8 grows it
 * again as it would anyway, so the steady state is unchanged. V8's `gc` is reached without starting
 * node with --expose-gc: the flag, set now, exposes it in a context created after it.
 */
export function collectStartupGarbage(): void {
  let gc = (globalThis as { gc?: (options?: object) => void }).gc
  if (gc === undefined) {
    // The flags are the process's, not the thread's: when two threads do this at once (two SQLite
    // stores starting together), one may find `gc` gone again. It is only memory: that thread skips it.
    setFlagsFromString('--expose-gc')
    try {
      gc = runInNewContext('gc') as (options?: object) => void
    } catch {
      return
    } finally {
      // Back as it was: V8's flags are part of the key of node's compile cache (and of its code
      // cache), so a thread started after this would miss the entries its modules have there.
      setFlagsFromString('--no-expose-gc')
    }
  }
  gc({ type: 'major', execution: 'sync', flavor: 'last-resort' })
}

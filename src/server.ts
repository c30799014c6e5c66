import { flushCompileCache } from 'node:module'
import { Server as NetServer } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp } from './app.ts'
import { ConfigError, loadConfig } from './config.ts'
import { createDeps, type Deps } from './deps.ts'
import { collectStartupGarbage } from './startup-gc.ts'

/** What src/start.mjs did about Node's compile cache (nothing when the gateway was started without it). */
interface CompileCacheOutcome {
  status: 'enabled' | 'failed' | 'off'
  directory?: string
  message?: string
}

/** Once, at debug level: a cache that could not be used is only slower starts and more memory. */
function logCompileCache(log: Pick<Deps['log'], 'debug'>): void {
  const outcome = (globalThis as Record<symbol, CompileCacheOutcome | undefined>)[
    Symbol.for('junction.compileCache')
  ]
  if (outcome === undefined) return
  log.debug({ compileCache: outcome }, `compile cache ${outcome.status}`)
}

async function main(): Promise<void> {
  let config
  try {
    config = loadConfig(process.env)
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`junction: ${err.message}`)
      process.exit(1)
    }
    throw err
  }
  const deps = await createDeps(config)
  if (config.devAccount) {
    deps.log.warn(
      'no accounts configured: the development account with key sk-dev is enabled (never in production)',
    )
  }
  const app = await buildApp(deps)
  await app.ready()
  collectStartupGarbage()
  await app.listen({ host: config.server.host, port: config.server.port })
  // The modules loaded so far into the compile cache now, not only at a clean exit (src/start.mjs).
  flushCompileCache()
  logCompileCache(deps.log)

  let stopping = false
  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    // Holds the process until the exit below. Without it, once the server and the timers are gone,
    // an await on an unref'd handle (the SQLite checkpoint thread's exit, in deps.close) let the event
    // loop run dry: the process ended by itself, before the store's last flush and without its last
    // log line ('stopped' was missing in 3 of 3 stops on the default SQLite store).
    setInterval(() => {}, 60_000)
    // From now on every request, on a connection kept alive from before, is answered 503 with
    // connection: close (app.ts), so its client learns to go elsewhere.
    deps.lifecycle.draining = true
    // Stop accepting connections but keep the open ones: http.Server's close() would also close the
    // idle keep-alive connections at once, and their clients would meet a reset instead of the 503.
    NetServer.prototype.close.call(app.server)
    const grace = config.server.shutdownGraceMs
    deps.log.info(
      { signal, graceMs: grace, inFlight: deps.lifecycle.inFlight },
      'shutting down: no new connections; waiting for in-flight requests',
    )
    // Streams still open when the grace period ends are cut; their generators still record them.
    let graceOver = false
    const force = setTimeout(() => {
      graceOver = true
      deps.log.warn('grace period over: closing remaining connections')
      app.server.closeAllConnections()
    }, grace)
    force.unref()
    // Nothing signals the last response's end: the count is polled.
    while (deps.lifecycle.inFlight > 0 && !graceOver) await sleep(50)
    // Idle connections close now; one busy with a late request (a /healthz) closes once answered.
    const sweep = setInterval(() => app.server.closeIdleConnections(), 100)
    sweep.unref()
    try {
      await app.close()
      await deps.close()
    } finally {
      clearTimeout(force)
      clearInterval(sweep)
      deps.log.info('stopped')
      // pino writes what it still holds synchronously on exit.
      process.exit(0)
    }
  }
  process.once('SIGTERM', () => void shutdown('SIGTERM'))
  process.once('SIGINT', () => void shutdown('SIGINT'))
}

main().catch((err: unknown) => {
  console.error('junction: failed to start', err)
  process.exit(1)
})

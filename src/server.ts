import { buildApp } from './app.ts'
import { ConfigError, loadConfig } from './config.ts'
import { createDeps } from './deps.ts'

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
  await app.listen({ host: config.server.host, port: config.server.port })

  let stopping = false
  const shutdown = async (signal: string): Promise<void> => {
    if (stopping) return
    stopping = true
    deps.lifecycle.draining = true
    const grace = config.server.shutdownGraceMs
    deps.log.info(
      { signal, graceMs: grace },
      'shutting down: no new connections; waiting for in-flight requests',
    )
    // Streams still open when the grace period ends are cut; their generators still record them.
    const force = setTimeout(() => {
      deps.log.warn('grace period over: closing remaining connections')
      app.server.closeAllConnections()
    }, grace)
    force.unref()
    // server.close() only closes connections idle at that moment; a keep-alive connection whose
    // stream ends later would hold the process open until its client leaves.
    const sweep = setInterval(() => app.server.closeIdleConnections(), 100)
    sweep.unref()
    try {
      await app.close()
      await deps.close()
    } finally {
      clearTimeout(force)
      clearInterval(sweep)
      deps.log.info('stopped')
      deps.log.flush()
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

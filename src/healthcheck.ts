import { loadConfig, type Config } from './config.ts'

// The container's health check (Dockerfile HEALTHCHECK): asks /healthz where the gateway really
// listens, as its configuration says (PORT, HOST, or the config file's server section), not only
// where the environment says. Exits 0 when healthy, 1 otherwise.

/** Where to ask: the configured port; a wildcard host is asked on the loopback address. */
export function healthcheckUrl(config: Config): string {
  const host = config.server.host
  const target = host === '0.0.0.0' || host === '::' || host === '' ? '127.0.0.1' : host
  const shown = target.includes(':') ? `[${target}]` : target
  return `http://${shown}:${config.server.port}/healthz`
}

if (import.meta.main) {
  let url: string
  try {
    url = healthcheckUrl(loadConfig(process.env))
  } catch {
    process.exit(1)
  }
  fetch(url, { signal: AbortSignal.timeout(4_000) }).then(
    (r) => process.exit(r.ok ? 0 : 1),
    () => process.exit(1),
  )
}

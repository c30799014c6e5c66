import type { FastifyInstance } from 'fastify'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { createDeps, type Deps, type DepsOverrides } from '../../src/deps.ts'
import { createLogger } from '../../src/logger.ts'

export interface TestGateway {
  app: FastifyInstance
  deps: Deps
  /** `http://127.0.0.1:<port>` when listening, '' for inject-only gateways. */
  origin: string
  close(): Promise<void>
}

export interface TestGatewayOptions {
  env?: Record<string, string>
  /** A GATEWAY_CONFIG file's JSON, given inline. */
  file?: unknown
  overrides?: DepsOverrides
  listen?: boolean
}

export const devAuth = { authorization: 'Bearer sk-dev' }

/** Builds the real app from env + config exactly as server.ts does, silent logs unless LOG_LEVEL is set. */
export async function startGateway(options: TestGatewayOptions = {}): Promise<TestGateway> {
  const env: Record<string, string> = { NODE_ENV: 'test', ...(options.env ?? {}) }
  if (options.file !== undefined) env.GATEWAY_CONFIG = 'inline.json'
  const config = loadConfig(env, () => JSON.stringify(options.file))
  const log = options.overrides?.log ?? createLogger(process.env.LOG_LEVEL ?? 'silent')
  const deps = await createDeps(config, { ...options.overrides, log })
  const app = await buildApp(deps)
  let origin = ''
  if (options.listen) {
    await app.listen({ host: '127.0.0.1', port: 0 })
    const addr = app.server.address()
    origin = typeof addr === 'object' && addr ? `http://127.0.0.1:${addr.port}` : ''
  } else {
    await app.ready()
  }
  return {
    app,
    deps,
    origin,
    async close() {
      await app.close()
      await deps.close()
    },
  }
}

import type { FastifyPluginAsync } from 'fastify'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'

export const healthRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  // Liveness: the process answers. It touches nothing else (no store, no disk), so it keeps answering
  // while the database stalls: restarting the process would not help a stalled disk.
  app.get('/healthz', async () => ({ status: 'ok' }))

  // Readiness: the store answers within `database.readyTimeoutMs` and the gateway is not draining.
  app.get('/readyz', async () => {
    const waitMs = deps.config.database.readyTimeoutMs
    let timer: NodeJS.Timeout | undefined
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the state store did not answer within ${waitMs} ms`)),
        waitMs,
      )
    })
    try {
      await Promise.race([deps.store.ping(), timedOut])
    } catch (err) {
      throw new GatewayError('store_unavailable', 'the state store is unreachable', { cause: err })
    } finally {
      clearTimeout(timer)
    }
    return { status: 'ready' }
  })
}

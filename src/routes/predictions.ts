import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { admitBeforeBody } from './admission.ts'

// docs/design/decisions.md, Predictions: create (returns at once), look up, cancel. The work is in predictions/.

/** The origin a client reached the gateway at: output URLs in its answers point there. */
export function requestOrigin(request: FastifyRequest, publicUrl: string | undefined): string {
  return publicUrl ?? `${request.protocol}://${request.host}`
}

export const predictionsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const { predictions } = deps
  const origin = (request: FastifyRequest) => requestOrigin(request, deps.config.predictions.publicUrl)

  // A repeat with an Idempotency-Key gets its first task whatever the balance: the service checks.
  const onRequest = admitBeforeBody(deps, {
    checkCredits: (request) => request.headers['idempotency-key'] === undefined,
  })
  app.post('/v1/predictions', { onRequest }, async (request) => {
    const key = request.headers['idempotency-key']
    const task = await predictions.create(request.account, request.body, {
      idempotencyKey: typeof key === 'string' ? key : undefined,
      origin: origin(request),
      requestCounted: request.junction.requestCounted,
      key: request.apiKey,
    })
    return { data: { task_id: task.id, task_status: task.status }, request_id: request.id }
  })

  app.get<{ Params: { id: string } }>('/v1/predictions/:id', async (request) => {
    const task = await predictions.get(request.account, request.params.id)
    return predictions.body(task, origin(request), request.id)
  })

  // The secret that signs this account's webhooks, so its receiver can verify them.
  app.get('/v1/webhooks/secret', { config: { keys: 'any' } }, async (request) => ({
    object: 'webhook_secret',
    secret: await deps.webhookSecrets.secretFor(request.account.id),
  }))

  app.post<{ Params: { id: string } }>('/v1/predictions/:id/cancel', async (request) => {
    const task = await predictions.cancel(request.account, request.params.id)
    return predictions.body(task, origin(request), request.id)
  })
}

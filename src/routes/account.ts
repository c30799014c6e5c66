import type { FastifyPluginAsync } from 'fastify'
import { z } from 'zod'
import { toGenerationBody } from '../schemas/generation.ts'
import type { Deps } from '../deps.ts'
import { GatewayError, invalidRequest } from '../errors.ts'
import { owned } from '../owned.ts'
import { toCreditsBody } from '../schemas/billing.ts'
import { parseQuery } from '../schemas/query.ts'

const generationQuery = z.object({ id: z.string().min(1).max(200).optional() })

export const accountRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  // Reads of the account's usage: any of its keys, a management key too.
  const any = { config: { keys: 'any' as const } }
  app.get('/v1/credits', any, async (request) => {
    const c = await deps.store.ledger.credits(request.account.id, deps.now())
    return { data: toCreditsBody(c) }
  })

  app.get('/v1/generation', any, async (request) => {
    const { id } = parseQuery(generationQuery, request.query)
    if (id === undefined) throw invalidRequest('missing_field', 'query parameter id is required', 'id')
    const record = owned(
      request.account.id,
      await deps.store.generations.get(id),
      () => new GatewayError('generation_not_found', `generation ${id} not found`, { param: 'id' }),
    )
    return toGenerationBody(record)
  })
}

import type { FastifyPluginAsync } from 'fastify'
import { z } from 'zod'
import { toGenerationBody } from '../billing/generation.ts'
import { toUsd } from '../billing/money.ts'
import type { Deps } from '../deps.ts'
import { GatewayError, invalidRequest } from '../errors.ts'

const generationQuery = z.object({ id: z.string().min(1).max(200).optional() })

export const accountRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  // Reads of the account's usage: any of its keys, a management key too.
  const any = { config: { keys: 'any' as const } }
  app.get('/v1/credits', any, async (request) => {
    const c = await deps.store.ledger.credits(request.account.id, deps.now())
    return {
      data: {
        total_credits: toUsd(c.totalCredits),
        total_usage: toUsd(c.totalUsage),
        balance: toUsd(c.totalCredits - c.totalUsage),
      },
    }
  })

  app.get('/v1/generation', any, async (request) => {
    const q = generationQuery.safeParse(request.query)
    const id = q.success ? q.data.id : undefined
    if (id === undefined) throw invalidRequest('missing_field', 'query parameter id is required', 'id')
    const record = await deps.store.generations.get(id)
    // Another account's record is as unknown as a missing one: never reveal that it exists.
    if (!record || record.accountId !== request.account.id) {
      throw new GatewayError('generation_not_found', `generation ${id} not found`, {
        param: 'id',
      })
    }
    return toGenerationBody(record)
  })
}

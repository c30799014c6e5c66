import type { FastifyPluginAsync, FastifyRequest } from 'fastify'
import { toGenerationBody } from '../schemas/generation.ts'
import type { Deps } from '../deps.ts'
import { GatewayError } from '../errors.ts'
import { healthKey } from '../routing/health.ts'
import { requireOperator } from '../auth/index.ts'
import { toPricing } from '../schemas/models.ts'
import { parseQuery } from '../schemas/query.ts'
import { activityQuery, activityReport } from './reports.ts'

// The operator's read-only reports (admin key): an account's spend per day and model, and the models
// in service with each deployment's prices and health as this instance sees it.

export const operatorRoutes: FastifyPluginAsync<{
  deps: Deps
  adminKey: string
  allow?: (request: FastifyRequest) => Promise<boolean>
}> = async (app, { deps, adminKey, allow }) => {
  app.addHook('onRequest', requireOperator(adminKey, allow))

  app.get<{ Params: { id: string } }>('/admin/accounts/:id/activity', async (request) => {
    const { days } = parseQuery(activityQuery, request.query)
    const account = await deps.store.accounts.get(request.params.id)
    if (!account) throw new GatewayError('account_not_found', `account ${request.params.id} not found`)
    return activityReport(deps.store, account.id, days, deps.now())
  })

  app.get<{ Params: { id: string } }>('/admin/generations/:id', async (request) => {
    const record = await deps.store.generations.get(request.params.id)
    if (!record) throw new GatewayError('generation_not_found', `generation ${request.params.id} not found`)
    return { ...toGenerationBody(record), account_id: record.accountId }
  })

  // Breakers and latencies are per instance (routing/health.ts): another instance may see otherwise.
  app.get('/admin/deployments', async () => ({
    object: 'list',
    data: deps.models.list().map((m) => ({
      model: m.slug,
      type: m.type,
      strategy: m.strategy,
      deployments: m.deployments.map((d) => {
        const h = deps.health.snapshot(healthKey(m.slug, d.id))
        return {
          id: d.id,
          provider: d.provider,
          upstream_model: d.upstreamModel,
          weight: d.weight,
          pricing: d.priced ? toPricing(d.price.table) : null,
          health: {
            breaker: h.state,
            consecutive_failures: h.consecutiveFailures,
            latency_ms: h.latencyMs === undefined ? null : Math.round(h.latencyMs),
            error_rate: h.errorRate === undefined ? null : Math.round(h.errorRate * 1000) / 1000,
          },
        }
      }),
    })),
  }))
}

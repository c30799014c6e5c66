import type { FastifyPluginAsync } from 'fastify'
import { z } from 'zod'
import { toGenerationBody } from '../schemas/generation.ts'
import { toUsd } from '../billing/money.ts'
import type { Deps } from '../deps.ts'
import { toAccountBody } from '../schemas/accounts.ts'
import { parseQuery } from '../schemas/query.ts'
import { DAY_MS } from '../store/activity.ts'
import type { ActivityRow, Store } from '../store/types.ts'
import { requestOrigin } from './predictions.ts'

// Read-only reports of the caller's account, for the console and any client: spend per day and model,
// the generation records, the prediction tasks and the webhook deliveries, each paged or bounded.

export const activityQuery = z
  .object({ days: z.enum(['7', '30', '90']).default('30').transform(Number) })
  .strict()
export const reportPageQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(100).default(20),
    before: z.string().min(1).max(200).optional(),
  })
  .strict()
export const generationsQuery = reportPageQuery
  .extend({ model: z.string().min(1).max(200).optional() })
  .strict()
export const deliveriesQuery = z
  .object({ limit: z.coerce.number().int().min(1).max(100).default(20) })
  .strict()

const isoDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10)

/** The last `days` UTC days, today included, summed per day and model, as the activity routes answer. */
export async function activityReport(store: Store, accountId: string, days: number, now: number) {
  const today = now - (now % DAY_MS)
  const since = today - (days - 1) * DAY_MS
  const rows = await store.generations.activity(accountId, since, today + DAY_MS)
  const sum = (f: (r: ActivityRow) => bigint) => rows.reduce((acc, r) => acc + f(r), 0n)
  return {
    object: 'list',
    days,
    since: isoDay(since),
    until: isoDay(today),
    data: rows.map((r) => ({
      date: isoDay(r.day),
      model: r.model,
      requests: r.requests,
      prompt_tokens: r.promptTokens,
      completion_tokens: r.completionTokens,
      upstream_cost: toUsd(r.upstreamCost),
      cost: toUsd(r.cost),
    })),
    // Summed exactly before conversion, so the total is not a float sum of the rows.
    total_cost: toUsd(sum((r) => r.cost)),
    total_requests: rows.reduce((n, r) => n + r.requests, 0),
  }
}

export const reportsRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const { store } = deps
  // Reads of the account's usage: any key of the account, a management key too. The task list holds
  // the outputs themselves, so it takes a key that calls models, as GET /v1/predictions/{id} does.
  const any = { config: { keys: 'any' as const } }

  // The caller's account: its credits with what is held now, its discount and rate limits.
  app.get('/v1/account', any, async (request) => {
    const a = request.account
    const c = await store.ledger.credits(a.id, deps.now())
    return toAccountBody(a, c, deps.config.limits.defaultRateLimits)
  })

  app.get('/v1/activity', any, async (request) => {
    const { days } = parseQuery(activityQuery, request.query)
    return activityReport(store, request.account.id, days, deps.now())
  })

  app.get('/v1/generations', any, async (request) => {
    const q = parseQuery(generationsQuery, request.query)
    const page = await store.generations.listByAccount(request.account.id, q)
    return { object: 'list', data: page.data.map(toGenerationBody), next_cursor: page.nextCursor }
  })

  app.get('/v1/predictions', async (request) => {
    const q = parseQuery(reportPageQuery, request.query)
    const page = await store.tasks.listByAccount(request.account.id, q)
    const origin = requestOrigin(request, deps.config.predictions.publicUrl)
    const data = await Promise.all(
      page.data.map(async (task) => {
        const body = await deps.predictions.body(task, origin, request.id)
        return {
          id: task.id,
          object: 'prediction',
          model: task.model,
          status: task.status,
          created_at: Math.floor(task.createdAt / 1000),
          updated_at: Math.floor(task.updatedAt / 1000),
          output: body.data.output ?? [],
          error: body.data.error ?? null,
          usage: body.usage ?? null,
        }
      }),
    )
    return { object: 'list', data, next_cursor: page.nextCursor }
  })

  app.get('/v1/webhooks/deliveries', any, async (request) => {
    const { limit } = parseQuery(deliveriesQuery, request.query)
    const deliveries = await store.webhooks.listByAccount(request.account.id, limit)
    return {
      object: 'list',
      data: deliveries.map((d) => ({
        id: d.id,
        object: 'webhook_delivery',
        task_id: d.taskId,
        url: d.url,
        status: d.status,
        attempts: d.attempts,
        last_error: d.lastError,
        created_at: Math.floor(d.createdAt / 1000),
        next_attempt_at: d.status === 'pending' ? Math.floor(d.nextAttemptAt / 1000) : null,
      })),
    }
  })
}

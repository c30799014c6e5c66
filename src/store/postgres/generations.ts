import { byDayThenModel, DAY_MS } from '../activity.ts'
import type { GenerationStore } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import { toMoney, type Query } from './pool.ts'

// Generation records: read here, written by the settle statement (ledger.ts).

interface GenerationRow {
  generation_id: string
  account_id: string
  api: string
  model: string
  provider: string
  created_at: string
  generation_time_ms: string
  latency_ms: string
  streamed: boolean
  finish_reason: string | null
  cancelled: boolean
  cost_source: GenerationRecord['costSource']
  usage: GenerationRecord['usage']
  upstream_cost: string
  discount_ppm: number
  discount: string
  cost: string
  attempts: GenerationRecord['attempts'] | null
  unbilled_usd: string | null
  unbilled_tokens: string | null
  key_hash: string | null
}

const toRecord = (r: GenerationRow): GenerationRecord => ({
  generationId: r.generation_id,
  accountId: r.account_id,
  api: r.api,
  model: r.model,
  provider: r.provider,
  createdAt: Number(r.created_at),
  generationTimeMs: Number(r.generation_time_ms),
  latencyMs: Number(r.latency_ms),
  streamed: r.streamed,
  finishReason: r.finish_reason,
  cancelled: r.cancelled,
  costSource: r.cost_source,
  usage: r.usage,
  upstreamCost: toMoney(r.upstream_cost),
  discountPpm: r.discount_ppm,
  discount: toMoney(r.discount),
  cost: toMoney(r.cost),
  ...(r.unbilled_usd !== null
    ? { unbilledOverage: { usd: toMoney(r.unbilled_usd), tokens: Number(r.unbilled_tokens) } }
    : {}),
  ...(r.attempts ? { attempts: r.attempts } : {}),
  ...(r.key_hash !== null ? { keyHash: r.key_hash } : {}),
})

export function createGenerations(query: Query): GenerationStore {
  return {
    async get(generationId) {
      const { rows } = await query<GenerationRow>('SELECT * FROM generations WHERE generation_id = $1', [
        generationId,
      ])
      return rows[0] ? toRecord(rows[0]) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      // The cursor is the last generation id of the previous page; an unknown one matches no seq.
      // A key filter uses its own index (generations_by_key). Parameters are numbered as they come.
      const params: unknown[] = [accountId, limit + 1]
      const where: string[] = []
      if (before !== undefined) {
        params.push(before)
        where.push(
          `AND seq < (SELECT seq FROM generations WHERE account_id = $1 AND generation_id = $${params.length})`,
        )
      }
      if (keyHash !== undefined) {
        params.push(keyHash)
        where.push(`AND key_hash = $${params.length}`)
      }
      if (model !== undefined) {
        params.push(model)
        where.push(`AND model = $${params.length}`)
      }
      const { rows } = await query<GenerationRow>(
        `SELECT * FROM generations WHERE account_id = $1 ${where.join(' ')} ORDER BY seq DESC LIMIT $2`,
        params,
      )
      const data = rows.slice(0, limit).map(toRecord)
      const more = rows.length > limit && data.length > 0
      return { data, nextCursor: more ? data.at(-1)!.generationId : null }
    },
    async activity(accountId, since, until) {
      const { rows } = await query<{
        day: string
        model: string
        requests: string
        prompt: string | null
        completion: string | null
        upstream_cost: string
        cost: string
      }>(
        `SELECT created_at - created_at % ${DAY_MS} AS day, model, count(*) AS requests,
           sum((usage->>'prompt_tokens')::bigint) AS prompt,
           sum((usage->>'completion_tokens')::bigint) AS completion,
           sum(upstream_cost)::text AS upstream_cost, sum(cost)::text AS cost
         FROM generations WHERE account_id = $1 AND created_at >= $2 AND created_at < $3
         GROUP BY 1, 2`,
        [accountId, since, until],
      )
      return rows
        .map((r) => ({
          day: Number(r.day),
          model: r.model,
          requests: Number(r.requests),
          promptTokens: Number(r.prompt ?? 0),
          completionTokens: Number(r.completion ?? 0),
          upstreamCost: BigInt(r.upstream_cost),
          cost: BigInt(r.cost),
        }))
        .sort(byDayThenModel)
    },
  }
}

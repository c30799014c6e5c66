import { byDayThenModel, DAY_MS, joinSplitSum, splitSumSql } from '../activity.ts'
import type { GenerationStore } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import type { SqliteHelpers } from './commit.ts'

// Generation records: their encoding (the ledger's settle writes them: ledger.ts) and their reads.

export const encodeRecord = (r: GenerationRecord): string =>
  JSON.stringify({
    ...r,
    upstreamCost: r.upstreamCost.toString(),
    discount: r.discount.toString(),
    cost: r.cost.toString(),
    ...(r.unbilledOverage
      ? { unbilledOverage: { usd: r.unbilledOverage.usd.toString(), tokens: r.unbilledOverage.tokens } }
      : {}),
  })
export const decodeRecord = (text: string): GenerationRecord => {
  const r = JSON.parse(text) as Omit<GenerationRecord, 'unbilledOverage'> & {
    upstreamCost: string
    discount: string
    cost: string
    unbilledOverage?: { usd: string; tokens: number }
  }
  const { unbilledOverage, ...rest } = r
  return {
    ...rest,
    upstreamCost: BigInt(r.upstreamCost),
    discount: BigInt(r.discount),
    cost: BigInt(r.cost),
    ...(unbilledOverage
      ? { unbilledOverage: { usd: BigInt(unbilledOverage.usd), tokens: unbilledOverage.tokens } }
      : {}),
  }
}

/**
 * A record on its way to the database thread (thread.ts): the fields a settlement reads, and the rest as
 * the JSON text it is stored as. The event loop makes the text (encodeRecord's); the thread then copies
 * one string rather than the record's dozen objects, and neither rebuilds nor serialises it again.
 */
export interface EncodedRecord extends Pick<
  GenerationRecord,
  'generationId' | 'accountId' | 'createdAt' | 'generationTimeMs' | 'cost'
> {
  keyHash?: string
  json: string
}

export const encodedRecord = (r: GenerationRecord): EncodedRecord => ({
  generationId: r.generationId,
  accountId: r.accountId,
  createdAt: r.createdAt,
  generationTimeMs: r.generationTimeMs,
  cost: r.cost,
  ...(r.keyHash === undefined ? {} : { keyHash: r.keyHash }),
  json: encodeRecord(r),
})

export function createSqliteGenerationStore({ get, all, read }: SqliteHelpers): GenerationStore {
  return {
    async get(id) {
      const r = read(() =>
        get<{ record: string }>('SELECT record FROM generations WHERE generation_id = ?', id),
      )
      return r ? decodeRecord(r.record) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      const rows = read(() => {
        // Filtered by key, through its own index (generations_by_key); the model lives in the
        // record's JSON, so a listing filtered by model reads the account's rows.
        const byKey = keyHash === undefined ? '' : 'AND key_hash = ?'
        const keyArg = keyHash === undefined ? [] : [keyHash]
        const byModel = model === undefined ? '' : "AND json_extract(record, '$.model') = ?"
        const modelArg = model === undefined ? [] : [model]
        if (before === undefined) {
          return all<{ generation_id: string; record: string }>(
            `SELECT generation_id, record FROM generations WHERE account_id = ? ${byKey} ${byModel}
             ORDER BY seq DESC LIMIT ?`,
            accountId,
            ...keyArg,
            ...modelArg,
            limit + 1,
          )
        }
        const at = get<{ seq: number }>(
          'SELECT seq FROM generations WHERE account_id = ? AND generation_id = ?',
          accountId,
          before,
        )
        if (!at) return []
        return all<{ generation_id: string; record: string }>(
          `SELECT generation_id, record FROM generations WHERE account_id = ? ${byKey} AND seq < ? ${byModel}
           ORDER BY seq DESC LIMIT ?`,
          accountId,
          ...keyArg,
          at.seq,
          ...modelArg,
          limit + 1,
        )
      })
      const page = rows.slice(0, limit)
      const more = rows.length > limit && page.length > 0
      return {
        data: page.map((r) => decodeRecord(r.record)),
        nextCursor: more ? page.at(-1)!.generation_id : null,
      }
    },
    async activity(accountId, since, until) {
      const [costHigh, costLow] = splitSumSql('cost')
      const [upHigh, upLow] = splitSumSql("json_extract(record, '$.upstreamCost')")
      const rows = read(() =>
        all<{
          day: number
          model: string
          requests: number
          prompt: number | null
          completion: number | null
          cost_high: number
          cost_low: number
          up_high: number
          up_low: number
        }>(
          `SELECT created_at - created_at % ${DAY_MS} AS day, json_extract(record, '$.model') AS model,
             count(*) AS requests,
             sum(json_extract(record, '$.usage.prompt_tokens')) AS prompt,
             sum(json_extract(record, '$.usage.completion_tokens')) AS completion,
             ${costHigh} AS cost_high, ${costLow} AS cost_low, ${upHigh} AS up_high, ${upLow} AS up_low
           FROM generations WHERE account_id = ? AND created_at >= ? AND created_at < ?
           GROUP BY 1, 2`,
          accountId,
          since,
          until,
        ),
      )
      return rows
        .map((r) => ({
          day: Number(r.day),
          model: r.model,
          requests: Number(r.requests),
          promptTokens: Number(r.prompt ?? 0),
          completionTokens: Number(r.completion ?? 0),
          upstreamCost: joinSplitSum(r.up_high, r.up_low),
          cost: joinSplitSum(r.cost_high, r.cost_low),
        }))
        .sort(byDayThenModel)
    },
  }
}

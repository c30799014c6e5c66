import { byDayThenModel, DAY_MS } from '../activity.ts'
import type { ActivityRow, GenerationStore } from '../types.ts'
import type { GenerationRecord } from '../../domain/records.ts'
import { copyRecord, pageBefore, type LedgerState } from './state.ts'

// Reads of the generation records the ledger's settle stores (ledger.ts), and their retention.

export function createMemoryGenerationStore(state: LedgerState): GenerationStore {
  const { states, records } = state
  return {
    async get(id) {
      const r = records.get(id)
      return r ? copyRecord(r) : null
    },
    async listByAccount(accountId, { limit, before, model, keyHash }) {
      let ids = states.get(accountId)?.generations ?? []
      if (model !== undefined) ids = ids.filter((id) => records.get(id)?.model === model)
      if (keyHash !== undefined) ids = ids.filter((id) => records.get(id)?.keyHash === keyHash)
      return pageBefore(ids, limit, before, (id) => copyRecord(records.get(id) as GenerationRecord))
    },
    async activity(accountId, since, until) {
      return activity(state, accountId, since, until)
    },
  }
}

function activity(state: LedgerState, accountId: string, since: number, until: number): ActivityRow[] {
  const rows = new Map<string, ActivityRow>()
  for (const id of state.states.get(accountId)?.generations ?? []) {
    const r = state.records.get(id)
    if (!r || r.createdAt < since || r.createdAt >= until) continue
    const day = r.createdAt - (r.createdAt % DAY_MS)
    const key = `${day}\0${r.model}`
    let row = rows.get(key)
    if (!row) {
      row = {
        day,
        model: r.model,
        requests: 0,
        promptTokens: 0,
        completionTokens: 0,
        upstreamCost: 0n,
        cost: 0n,
      }
      rows.set(key, row)
    }
    row.requests++
    row.promptTokens += r.usage.prompt_tokens
    row.completionTokens += r.usage.completion_tokens
    row.upstreamCost += r.upstreamCost
    row.cost += r.cost
  }
  return [...rows.values()].sort(byDayThenModel)
}

/**
 * Retention: deletes the records created before `cutoff`. Usage totals stay, and so do the settled
 * ids (state.ts): a repeated settle stays a no-op.
 */
export function dropRecordsBefore(state: LedgerState, cutoff: number): void {
  for (const s of state.states.values()) {
    s.generations = s.generations.filter((id) => {
      const r = state.records.get(id)
      if (r && r.createdAt >= cutoff) return true
      state.records.delete(id)
      return false
    })
  }
}

import { normalizeUsage } from '../src/billing/metering.ts'
import type { Account, ApiKeyRecord } from '../src/domain/accounts.ts'
import type { GenerationRecord } from '../src/domain/records.ts'
import type { Store } from '../src/store/types.ts'

// The one account (and, when asked, its API key) the store benches make their requests with: credits
// that never run out, no discounts, no limits of its own.

export const BENCH_KEY_HASH = 'b'.repeat(64)

export async function createBenchAccount(
  store: Store,
  withKey: boolean,
): Promise<{ account: Account; key: ApiKeyRecord | undefined }> {
  const account: Account = {
    id: 'bench',
    name: 'bench',
    createdAt: 0,
    discountPpm: 0,
    modelDiscountsPpm: {},
    rateLimits: {},
  }
  await store.accounts.create(account, 10n ** 24n)
  const key = withKey
    ? { id: 'bench-key', accountId: account.id, hash: BENCH_KEY_HASH, prefix: 'sk-bench', createdAt: 0 }
    : undefined
  if (key) await store.accounts.addKey(key)
  return { account, key }
}

/** A blocking chat's generation record as the store benches settle it: 10 + 5 tokens costing `cost`. */
export function benchRecord(
  generationId: string,
  accountId: string,
  createdAt: number,
  cost: bigint,
): GenerationRecord {
  return {
    generationId,
    accountId,
    api: '/v1/chat/completions',
    model: 'openai/gpt-4o-mini',
    provider: 'openai',
    createdAt,
    generationTimeMs: 1,
    latencyMs: 1,
    streamed: false,
    finishReason: 'stop',
    cancelled: false,
    costSource: 'upstream',
    usage: normalizeUsage({ prompt_tokens: 10, completion_tokens: 5 }),
    upstreamCost: cost,
    discountPpm: 0,
    discount: 0n,
    cost,
  }
}

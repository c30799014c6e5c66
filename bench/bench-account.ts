import type { Account, ApiKeyRecord } from '../src/domain/accounts.ts'
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

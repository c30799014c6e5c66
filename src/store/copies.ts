import type { KeyLookup } from './types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'

// Copies of what a store hands out, so no caller shares an object the store (or its cache) keeps. By
// hand: structuredClone costs several microseconds on every authenticated request.

export const copyAccount = (a: Account): Account => ({
  ...a,
  modelDiscountsPpm: { ...a.modelDiscountsPpm },
  rateLimits: { ...a.rateLimits },
  ...(a.notices ? { notices: { ...a.notices } } : {}),
})

export const copyKey = (k: ApiKeyRecord): ApiKeyRecord => ({
  ...k,
  ...(k.allowedModels ? { allowedModels: [...k.allowedModels] } : {}),
  ...(k.rateLimits ? { rateLimits: { ...k.rateLimits } } : {}),
})

/** A key lookup: its account and its key, each copied. */
export const copyLookup = (l: KeyLookup): KeyLookup => ({
  account: copyAccount(l.account),
  key: copyKey(l.key),
})

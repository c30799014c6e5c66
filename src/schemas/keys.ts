import { z } from 'zod'
import { toUsd, usdRounded } from '../billing/money.ts'
import { spentFor } from '../store/key-usage.ts'
import type { KeyPatch } from '../store/types.ts'
import type { Account, ApiKeyRecord, KeyUsage, RateLimits } from '../domain/accounts.ts'
import type { Money } from '../domain/money.ts'

// The account's key API in OpenRouter's shapes (its SDKs and scripts read these): `data` wrappers,
// `hash` (the key's SHA-256, never the key), `name`/`label`, `limit` and `limit_reset`, usage per
// UTC day/week/month, ISO 8601 times. Junction's own settings (allowed models, per-key rate limits,
// the role, the notice threshold) are extra fields beside them.

/** USD with picodollar precision; null clears it. */
const usdAmount = z.number().min(0).max(1e9).transform(usdRounded)

/** ISO 8601 in UTC (`…Z`), as OpenRouter takes it: another offset is refused rather than guessed. */
const utcTime = z.iso
  .datetime({ offset: false })
  .transform((t) => Date.parse(t))
  .refine((ms) => Number.isFinite(ms), 'must be an ISO 8601 UTC time')

const rateLimitsBody = z
  .object({
    requests_per_minute: z.number().int().positive().max(1e9).nullable().optional(),
    tokens_per_minute: z.number().int().positive().max(1e12).nullable().optional(),
  })
  .strict()

/** A model slug or a pattern with `*` (`anthropic/*`). */
const modelPattern = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[A-Za-z0-9_.:/@*-]+$/, 'a model slug or a pattern such as anthropic/*')

const settingsShape = {
  limit: usdAmount.nullable().optional(),
  limit_reset: z.enum(['daily', 'weekly', 'monthly']).nullable().optional(),
  expires_at: utcTime.nullable().optional(),
  disabled: z.boolean().optional(),
  allowed_models: z.array(modelPattern).max(100).nullable().optional(),
  rate_limits: rateLimitsBody.nullable().optional(),
  /** `key.limit.low` is sent when what the key has left of its limit falls to or below this. */
  limit_low_threshold: usdAmount.nullable().optional(),
  // OpenRouter fields without meaning here (no bring-your-own-key usage, no workspaces): accepted so
  // its SDKs work unchanged, and ignored.
  include_byok_in_limit: z.boolean().optional(),
  creator_user_id: z.string().max(200).nullable().optional(),
  workspace_id: z.string().max(200).nullable().optional(),
}

/** `POST /v1/keys`: OpenRouter's body (its `name` is required there, optional here). */
export const createKeyBody = z
  .object({ name: z.string().trim().min(1).max(200).optional(), ...settingsShape })
  .strict()

/** The admin API's `POST /admin/accounts/{id}/keys`: the same, and the key's role. */
export const adminCreateKeyBody = createKeyBody.extend({ management: z.boolean().optional() }).strict()

/** `PATCH /v1/keys/{hash}`: any of the settings; null clears one. */
export const updateKeyBody = z
  .object({ name: z.string().trim().min(1).max(200).optional(), ...settingsShape })
  .strict()

export type CreateKeyBody = z.infer<typeof adminCreateKeyBody>
export type UpdateKeyBody = z.infer<typeof updateKeyBody>

/** The settings a body sets, as a key patch (fields it leaves out are absent). */
export function toKeyPatch(body: UpdateKeyBody): KeyPatch {
  const patch: KeyPatch = {}
  if (body.name !== undefined) patch.name = body.name
  if (body.limit !== undefined) patch.limit = body.limit
  if (body.limit_reset !== undefined) patch.limitReset = body.limit_reset
  if (body.expires_at !== undefined) patch.expiresAt = body.expires_at
  if (body.disabled !== undefined) patch.disabled = body.disabled
  if (body.allowed_models !== undefined) patch.allowedModels = body.allowed_models
  if (body.limit_low_threshold !== undefined) patch.limitLow = body.limit_low_threshold
  if (body.rate_limits !== undefined) {
    const r = body.rate_limits ?? {}
    const limits: RateLimits = {}
    if (r.requests_per_minute != null) limits.requestsPerMinute = r.requests_per_minute
    if (r.tokens_per_minute != null) limits.tokensPerMinute = r.tokens_per_minute
    patch.rateLimits = limits
  }
  return patch
}

const iso = (ms: number | null | undefined): string | null =>
  ms === undefined || ms === null ? null : new Date(ms).toISOString()

/** A key's label: what of it may be shown (its first characters), as OpenRouter labels keys. */
export function keyLabel(k: ApiKeyRecord): string {
  return k.prefix === '' ? `${k.hash.slice(0, 12)}...` : `${k.prefix}...`
}

/** What the key may still spend in its window (its open holds aside); null: no limit. */
export function limitRemaining(k: ApiKeyRecord, u: KeyUsage): Money | null {
  if (k.limit === undefined || k.limit === null) return null
  const left = k.limit - spentFor(u, k.limitReset ?? null)
  return left > 0n ? left : 0n
}

const usdOrNull = (m: Money | null | undefined): number | null =>
  m === undefined || m === null ? null : toUsd(m)

/** One key as `GET /v1/keys/{hash}` and the listing show it (OpenRouter's fields first). */
export function toKeyBody(k: ApiKeyRecord, u: KeyUsage) {
  return {
    hash: k.hash,
    name: k.name ?? keyLabel(k),
    label: keyLabel(k),
    disabled: k.disabled === true,
    limit: usdOrNull(k.limit),
    limit_remaining: usdOrNull(limitRemaining(k, u)),
    limit_reset: k.limitReset ?? null,
    include_byok_in_limit: false,
    usage: toUsd(u.total),
    usage_daily: toUsd(u.daily),
    usage_weekly: toUsd(u.weekly),
    usage_monthly: toUsd(u.monthly),
    byok_usage: 0,
    byok_usage_daily: 0,
    byok_usage_weekly: 0,
    byok_usage_monthly: 0,
    created_at: iso(k.createdAt),
    updated_at: iso(k.updatedAt),
    expires_at: iso(k.expiresAt),
    // Junction's own.
    is_management_key: k.management === true,
    allowed_models: k.allowedModels ?? null,
    rate_limits: {
      requests_per_minute: k.rateLimits?.requestsPerMinute ?? null,
      tokens_per_minute: k.rateLimits?.tokensPerMinute ?? null,
    },
    limit_low_threshold: usdOrNull(k.limitLow),
    /** USD its requests in flight hold against its limit now. */
    held: toUsd(u.held),
  }
}

/**
 * `GET /v1/key`: the calling key, in OpenRouter's "current key" shape. `rate_limit` is the
 * requests-per-minute limit in force for it (the key's or the account's, the lower; -1: none).
 */
export function toCurrentKeyBody(k: ApiKeyRecord, u: KeyUsage, account: Account, defaultRpm?: number) {
  const limits = [k.rateLimits?.requestsPerMinute, account.rateLimits.requestsPerMinute ?? defaultRpm]
  const rpm = limits.filter((v): v is number => v !== undefined)
  const body = toKeyBody(k, u)
  return {
    label: body.label,
    name: body.name,
    hash: body.hash,
    limit: body.limit,
    limit_remaining: body.limit_remaining,
    limit_reset: body.limit_reset,
    include_byok_in_limit: false,
    usage: body.usage,
    usage_daily: body.usage_daily,
    usage_weekly: body.usage_weekly,
    usage_monthly: body.usage_monthly,
    byok_usage: 0,
    byok_usage_daily: 0,
    byok_usage_weekly: 0,
    byok_usage_monthly: 0,
    is_free_tier: false,
    is_management_key: body.is_management_key,
    is_provisioning_key: body.is_management_key,
    expires_at: body.expires_at,
    rate_limit: { requests: rpm.length > 0 ? Math.min(...rpm) : -1, interval: '1m' },
    disabled: body.disabled,
    allowed_models: body.allowed_models,
    rate_limits: body.rate_limits,
    created_at: body.created_at,
    updated_at: body.updated_at,
  }
}

/** `PUT /v1/notices` (and the admin API's): where and when the account is told; null clears one. */
export const noticesBody = z
  .object({
    url: z.string().min(1).max(2000).nullable().optional(),
    balance_low_threshold: usdAmount.nullable().optional(),
  })
  .strict()

export function toNoticesBody(account: Account) {
  const n = account.notices
  return {
    url: n?.url ?? null,
    balance_low_threshold: usdOrNull(n?.balanceLow ?? null),
  }
}

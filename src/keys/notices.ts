import { toUsd } from '../billing/money.ts'
import type { PredictionsConfig } from '../predictions/config.ts'
import { checkUrl, resolveAllowed } from '../http/address-guard.ts'
import type { Logger } from '../logger.ts'
import { spentFor, windowStart } from '../store/key-usage.ts'
import type { Store, WebhookDelivery } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'

// Notices to the account (`balance.low`, `key.limit.low`): checked after a generation is settled, when
// the account has a notice URL and a threshold, and queued as a signed webhook delivery through the
// predictions' webhook sender (same signing, retries and address rules).
//
// Once per crossing: the delivery's id names the crossing (the account's credits level for the balance;
// the key's window and limit for the key), and the store keeps one delivery per id. So every settle
// that finds the balance at or below the threshold may queue it, concurrent ones included, and the
// receiver hears once; adding credits (or a new window, or a changed limit) makes the next crossing a
// new one.

export type NoticeEvent = 'balance.low' | 'key.limit.low'

export interface NoticeDeps {
  store: Store
  log: Logger
}

function delivery(
  id: string,
  accountId: string,
  url: string,
  event: NoticeEvent,
  data: object,
  now: number,
): WebhookDelivery {
  return {
    id,
    // Not a task: the delivery's own id stands in (listByTask finds it by that).
    taskId: id,
    accountId,
    url,
    body: JSON.stringify({ type: event, timestamp: new Date(now).toISOString(), data }),
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    lastError: null,
    leaseOwner: '',
    leaseUntil: 0,
    createdAt: now,
  }
}

/** Whether a settle by `account` (with `key`) may have crossed a threshold: nothing to read otherwise. */
export function wantsNotices(account: Account, key: ApiKeyRecord | undefined): boolean {
  const n = account.notices
  if (!n?.url) return false
  return n.balanceLow !== null || (key?.limitLow != null && key.limit != null)
}

/** Reads the balance and the key's spend after a settle, and queues the notices now due. Never throws. */
export async function checkNotices(
  deps: NoticeDeps,
  account: Account,
  key: ApiKeyRecord | undefined,
  now: number,
): Promise<void> {
  const url = account.notices?.url
  if (!url) return
  try {
    const balanceLow = account.notices?.balanceLow ?? null
    if (balanceLow !== null) {
      const c = await deps.store.ledger.credits(account.id, now)
      const balance = c.totalCredits - c.totalUsage
      if (balance <= balanceLow) {
        await deps.store.webhooks.enqueue(
          delivery(
            `msg_balance_low_${account.id}_${c.totalCredits}_${balanceLow}`,
            account.id,
            url,
            'balance.low',
            {
              account_id: account.id,
              balance: toUsd(balance),
              threshold: toUsd(balanceLow),
              total_credits: toUsd(c.totalCredits),
              total_usage: toUsd(c.totalUsage),
            },
            now,
          ),
        )
      }
    }
    const limit = key?.limit ?? null
    const limitLow = key?.limitLow ?? null
    if (key && limit !== null && limitLow !== null) {
      const u = (await deps.store.ledger.keyUsage(account.id, [key.hash], now))[0]!
      const reset = key.limitReset ?? null
      const remaining = limit - spentFor(u, reset)
      if (remaining <= limitLow) {
        const window = reset === null ? 0 : windowStart(reset, now)
        await deps.store.webhooks.enqueue(
          delivery(
            `msg_key_limit_low_${key.hash.slice(0, 32)}_${window}_${limit}_${limitLow}`,
            account.id,
            url,
            'key.limit.low',
            {
              key_hash: key.hash,
              name: key.name ?? null,
              limit: toUsd(limit),
              limit_remaining: toUsd(remaining > 0n ? remaining : 0n),
              limit_reset: reset,
              threshold: toUsd(limitLow),
              usage: toUsd(spentFor(u, reset)),
            },
            now,
          ),
        )
      }
    }
  } catch (err) {
    deps.log.warn({ err, accountId: account.id }, 'could not check or queue a low-balance notice')
  }
}

/** The account's notice settings after `body` (fields it leaves out keep their value). */
export function applyNotices(
  current: Account['notices'],
  body: { url?: string | null; balance_low_threshold?: bigint | null },
): NonNullable<Account['notices']> {
  return {
    url: body.url === undefined ? (current?.url ?? null) : body.url,
    balanceLow:
      body.balance_low_threshold === undefined ? (current?.balanceLow ?? null) : body.balance_low_threshold,
  }
}

/**
 * Refuses (400, param `url`) a notice URL the gateway must not call: the predictions' webhook rules
 * (https, no private or loopback address unless the config allows it), checked again at delivery.
 */
/** The one slice notices read: the webhook rules of predictions. */
export interface NoticesConfig {
  predictions: { webhooks: Pick<PredictionsConfig['webhooks'], 'allowHttp' | 'allowedHosts'> }
}

export async function checkNoticeUrl(config: NoticesConfig, raw: string): Promise<void> {
  const policy = {
    allowHttp: config.predictions.webhooks.allowHttp,
    allowedHosts: config.predictions.webhooks.allowedHosts,
  }
  await resolveAllowed(checkUrl(raw, policy, 'url'), policy, undefined, 'url')
}

/** Sets the account's notices from a `PUT /v1/notices` body; returns the account as changed. */
export async function setNotices(
  store: Store,
  config: NoticesConfig,
  account: Account,
  body: { url?: string | null; balance_low_threshold?: bigint | null },
): Promise<Account> {
  if (body.url) await checkNoticeUrl(config, body.url)
  const updated = await store.accounts.update(account.id, { notices: applyNotices(account.notices, body) })
  return updated ?? account
}

import { randomBytes } from 'node:crypto'
import { hashKey, KEY_PREFIX_LENGTH } from '../auth/index.ts'
import { GatewayError } from '../errors.ts'
import type { CreateKeyBody } from '../schemas/keys.ts'
import { toKeyPatch } from '../schemas/keys.ts'
import type { KeyPatch, Store } from '../store/types.ts'
import type { ApiKeyRecord, KeyUsage } from '../domain/accounts.ts'

// An account's keys: issued (the secret answered once, only its hash kept), listed with their spend,
// changed and revoked, always within one account: another account's key is as unknown as a missing one.

/** Keys one account may have at once. */
export const MAX_KEYS_PER_ACCOUNT = 1000

export interface KeyWithUsage {
  key: ApiKeyRecord
  usage: KeyUsage
}

export interface KeyService {
  /** A new key; `secret` is the only time the key itself exists outside its holder. */
  issue(accountId: string, body: CreateKeyBody): Promise<{ secret: string; key: KeyWithUsage }>
  list(
    accountId: string,
    page: { offset: number; limit: number; includeDisabled: boolean },
  ): Promise<KeyWithUsage[]>
  /** 404 `key_not_found` unless the account has a key with that hash. */
  get(accountId: string, hash: string): Promise<KeyWithUsage>
  update(accountId: string, hash: string, patch: KeyPatch): Promise<KeyWithUsage>
  remove(accountId: string, hash: string): Promise<void>
  usage(accountId: string, key: ApiKeyRecord): Promise<KeyUsage>
}

export function createKeyService(store: Store, now: () => number): KeyService {
  const notFound = (hash: string) =>
    new GatewayError('key_not_found', `key ${hash.slice(0, 64)} not found`, { param: 'hash' })
  const usage = async (accountId: string, key: ApiKeyRecord): Promise<KeyUsage> =>
    (await store.ledger.keyUsage(accountId, [key.hash], now()))[0]!
  const withUsage = async (accountId: string, key: ApiKeyRecord): Promise<KeyWithUsage> => ({
    key,
    usage: await usage(accountId, key),
  })

  return {
    async issue(accountId, body) {
      if ((await store.accounts.listKeys(accountId)).length >= MAX_KEYS_PER_ACCOUNT) {
        throw new GatewayError('too_many_keys', `an account has at most ${MAX_KEYS_PER_ACCOUNT} keys`)
      }
      const secret = `sk-jn-${randomBytes(24).toString('base64url')}`
      const record: ApiKeyRecord = {
        id: `key_${randomBytes(8).toString('hex')}`,
        accountId,
        hash: hashKey(secret),
        prefix: secret.slice(0, KEY_PREFIX_LENGTH),
        createdAt: now(),
        ...toKeyPatch(body),
        ...(body.management ? { management: true } : {}),
      }
      await store.accounts.addKey(record)
      const stored = (await store.accounts.getKey(accountId, record.hash)) ?? record
      return { secret, key: await withUsage(accountId, stored) }
    },
    async list(accountId, page) {
      const all = (await store.accounts.listKeys(accountId)).filter(
        (k) => page.includeDisabled || k.disabled !== true,
      )
      const keys = all.slice(page.offset, page.offset + page.limit)
      const usages = await store.ledger.keyUsage(
        accountId,
        keys.map((k) => k.hash),
        now(),
      )
      return keys.map((key, i) => ({ key, usage: usages[i]! }))
    },
    async get(accountId, hash) {
      const key = await store.accounts.getKey(accountId, hash)
      if (!key) throw notFound(hash)
      return withUsage(accountId, key)
    },
    async update(accountId, hash, patch) {
      const key = await store.accounts.updateKey(accountId, hash, { ...patch, updatedAt: now() })
      if (!key) throw notFound(hash)
      return withUsage(accountId, key)
    },
    async remove(accountId, hash) {
      const key = await store.accounts.getKey(accountId, hash)
      if (!key || !(await store.accounts.removeKey(accountId, key.id))) throw notFound(hash)
    },
    usage,
  }
}

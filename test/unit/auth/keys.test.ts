import type { FastifyRequest } from 'fastify'
import { describe, expect, it } from 'vitest'
import { hashKey, requireAccountKey } from '../../../src/auth/keys.ts'
import type { AccountStore, KeyLookup } from '../../../src/store/types.ts'
import type { Account, ApiKeyRecord } from '../../../src/domain/accounts.ts'

const NOW = 1_700_000_000_000
const account = { id: 'acme', name: 'acme', createdAt: 0 } as Account
const key = (over: Partial<ApiKeyRecord> = {}): ApiKeyRecord => ({
  id: 'key_1',
  accountId: 'acme',
  hash: hashKey('sk-acme'),
  prefix: 'sk-acme',
  createdAt: 0,
  ...over,
})

/** An account store that knows one key, by its hash. */
function storeWith(record: ApiKeyRecord): AccountStore {
  return {
    findKey: async (hash: string) => (hash === record.hash ? { account, key: record } : null),
  } as unknown as AccountStore
}

function request(headers: Record<string, string>, role?: 'inference' | 'management' | 'any'): FastifyRequest {
  return { headers, routeOptions: { config: role === undefined ? {} : { keys: role } } } as FastifyRequest
}

describe('account keys', () => {
  it('hashKey is the hex SHA-256 of the key', () => {
    expect(hashKey('sk-dev')).toMatch(/^[0-9a-f]{64}$/)
    expect(hashKey('sk-dev')).toBe(hashKey('sk-dev'))
    expect(hashKey('sk-dev')).not.toBe(hashKey('sk-dew'))
  })

  it('a bearer key of the account is admitted and set on the request', async () => {
    const hook = requireAccountKey(storeWith(key()), () => NOW)
    const req = request({ authorization: 'Bearer sk-acme' })
    await hook(req)
    expect(req.account).toBe(account)
    expect(req.apiKey.id).toBe('key_1')
  })

  it('no key, an unknown one, a disabled or expired one: 401 with their codes', async () => {
    const hook = requireAccountKey(storeWith(key()), () => NOW)
    await expect(hook(request({}))).rejects.toMatchObject({ status: 401, code: 'missing_api_key' })
    await expect(hook(request({ authorization: 'Bearer sk-other' }))).rejects.toMatchObject({
      status: 401,
      code: 'invalid_api_key',
    })
    const disabled = requireAccountKey(storeWith(key({ disabled: true })), () => NOW)
    await expect(disabled(request({ authorization: 'Bearer sk-acme' }))).rejects.toMatchObject({
      code: 'key_disabled',
    })
    const expired = requireAccountKey(storeWith(key({ expiresAt: NOW })), () => NOW)
    await expect(expired(request({ authorization: 'Bearer sk-acme' }))).rejects.toMatchObject({
      code: 'key_expired',
    })
  })

  it('the console session key comes first; without one, the bearer', async () => {
    const fromSession = key({ id: 'key_session' })
    const lookup: KeyLookup = { account, key: fromSession }
    const withSession = requireAccountKey(
      storeWith(key()),
      () => NOW,
      async () => lookup,
    )
    const req = request({})
    await withSession(req)
    expect(req.apiKey.id).toBe('key_session')
    const noSession = requireAccountKey(
      storeWith(key()),
      () => NOW,
      async () => null,
    )
    const bearer = request({ authorization: 'Bearer sk-acme' })
    await noSession(bearer)
    expect(bearer.apiKey.id).toBe('key_1')
  })

  it('a key is judged against the route role: 403 for the wrong kind', async () => {
    const management = requireAccountKey(storeWith(key({ management: true })), () => NOW)
    await expect(management(request({ authorization: 'Bearer sk-acme' }))).rejects.toMatchObject({
      status: 403,
      code: 'management_key_not_allowed',
    })
    await expect(management(request({ authorization: 'Bearer sk-acme' }, 'any'))).resolves.toBeUndefined()
    const inference = requireAccountKey(storeWith(key()), () => NOW)
    await expect(inference(request({ authorization: 'Bearer sk-acme' }, 'management'))).rejects.toMatchObject(
      {
        status: 403,
        code: 'management_key_required',
      },
    )
  })
})

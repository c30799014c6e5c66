import type { FastifyRequest } from 'fastify'
import { hashKey } from './config.ts'
import { GatewayError } from './errors.ts'
import type { Account, AccountStore } from './store/types.ts'

declare module 'fastify' {
  interface FastifyRequest {
    account: Account
  }
}

const bearer = /^Bearer\s+(\S+)\s*$/i

/**
 * Bearer auth by hash lookup: the key is hashed and the hash looked up, so no key is ever compared
 * character by character or kept in plain text. Neither the key nor the header is ever logged.
 */
export async function authenticate(request: FastifyRequest, accounts: AccountStore): Promise<Account> {
  const header = request.headers.authorization
  if (header === undefined || header === '') {
    throw new GatewayError('missing_api_key', 'missing API key: send Authorization: Bearer <key>')
  }
  return findAccount(bearer.exec(header)?.[1], accounts)
}

/**
 * The Anthropic dialect's auth: `x-api-key: <key>` as Anthropic's SDK sends it, or a bearer token
 * (Claude Code sends either). Checked the same way as authenticate.
 */
export async function authenticateApiKey(request: FastifyRequest, accounts: AccountStore): Promise<Account> {
  const apiKey = request.headers['x-api-key']
  if (typeof apiKey === 'string' && apiKey !== '') return findAccount(apiKey.trim(), accounts)
  const header = request.headers.authorization
  if (header === undefined || header === '') {
    throw new GatewayError(
      'missing_api_key',
      'missing API key: send x-api-key: <key> or Authorization: Bearer <key>',
    )
  }
  return findAccount(bearer.exec(header)?.[1], accounts)
}

async function findAccount(key: string | undefined, accounts: AccountStore): Promise<Account> {
  const account = key === undefined || key.length > 512 ? null : await accounts.findByKeyHash(hashKey(key))
  if (!account) throw new GatewayError('invalid_api_key', 'invalid API key')
  return account
}

import { hash } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { GatewayError } from '../errors.ts'
import type { AccountStore, KeyLookup } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'

// Account keys (inference and management): a bearer or x-api-key looked up by its hash, the key's role
// against the route's, and the key's model allow-list.

declare module 'fastify' {
  interface FastifyRequest {
    account: Account
    /** The key the request was made with, and its settings (limits, models, role). */
    apiKey: ApiKeyRecord
  }
  interface FastifyContextConfig {
    /**
     * Which keys may call the route: `inference` (the default: keys that call models), `management`
     * (only management keys: the account's key API), `any` (reads of the account: credits, usage).
     */
    keys?: KeyRole
  }
}

export type KeyRole = 'inference' | 'management' | 'any'

/** API keys are stored and looked up by their SHA-256, never in plain text. */
export function hashKey(key: string): string {
  return hash('sha256', key, 'hex')
}

/** How much of a key the admin API shows (issued keys and plain keys of the config file). */
export const KEY_PREFIX_LENGTH = 10

/** `Authorization: Bearer <token>`: the token. */
export const bearer = /^Bearer\s+(\S+)\s*$/i

/**
 * Bearer auth by hash lookup: the key is hashed and the hash looked up, so no key is ever compared
 * character by character or kept in plain text. Neither the key nor the header is ever logged. A
 * disabled or expired key is refused (401) like an unknown one, with its own code.
 */
export async function authenticate(
  request: FastifyRequest,
  accounts: AccountStore,
  now: number,
): Promise<KeyLookup> {
  const header = request.headers.authorization
  if (header === undefined || header === '') {
    throw new GatewayError('missing_api_key', 'missing API key: send Authorization: Bearer <key>')
  }
  return findKey(bearer.exec(header)?.[1], accounts, now)
}

/**
 * The Anthropic dialect's auth: `x-api-key: <key>` as Anthropic's SDK sends it, or a bearer token
 * (Claude Code sends either). Checked the same way as authenticate.
 */
export async function authenticateApiKey(
  request: FastifyRequest,
  accounts: AccountStore,
  now: number,
): Promise<KeyLookup> {
  const apiKey = request.headers['x-api-key']
  if (typeof apiKey === 'string' && apiKey !== '') return findKey(apiKey.trim(), accounts, now)
  const header = request.headers.authorization
  if (header === undefined || header === '') {
    throw new GatewayError(
      'missing_api_key',
      'missing API key: send x-api-key: <key> or Authorization: Bearer <key>',
    )
  }
  return findKey(bearer.exec(header)?.[1], accounts, now)
}

async function findKey(key: string | undefined, accounts: AccountStore, now: number): Promise<KeyLookup> {
  const found = key === undefined || key.length > 512 ? null : await accounts.findKey(hashKey(key))
  if (!found) throw new GatewayError('invalid_api_key', 'invalid API key')
  if (found.key.disabled) throw new GatewayError('key_disabled', 'this API key is disabled')
  const expiresAt = found.key.expiresAt
  if (expiresAt !== undefined && expiresAt !== null && expiresAt <= now) {
    throw new GatewayError('key_expired', `this API key expired at ${new Date(expiresAt).toISOString()}`)
  }
  return found
}

/**
 * Sets the request's account and key, then checks the key's role against the route's (`keys` in the
 * route's config): a management key never calls a model, an inference key never manages keys (403).
 */
export function admitKey(request: FastifyRequest, found: KeyLookup): void {
  request.account = found.account
  request.apiKey = found.key
  const role = request.routeOptions.config?.keys ?? 'inference'
  if (role === 'any') return
  if (found.key.management === true && role === 'inference') {
    throw new GatewayError(
      'management_key_not_allowed',
      'a management key only manages the account’s keys and reads its usage; use an inference key to call models',
    )
  }
  if (found.key.management !== true && role === 'management') {
    throw new GatewayError('management_key_required', 'a management key of the account is required')
  }
}

/**
 * The onRequest hook of the account routes (/v1, /routed): the key of the request's console session
 * (`fromSession`, when the console is on) first, else the bearer key; then admitKey judges its role.
 */
export function requireAccountKey(
  accounts: AccountStore,
  now: () => number,
  fromSession?: (request: FastifyRequest) => Promise<KeyLookup | null>,
): (request: FastifyRequest) => Promise<void> {
  return async (request) => {
    admitKey(request, (await fromSession?.(request)) ?? (await authenticate(request, accounts, now())))
  }
}

/** Whether `slug` is one of the key's allowed models: a slug, or a pattern where `*` stands for anything. */
export function modelAllowed(key: ApiKeyRecord | undefined, slug: string): boolean {
  const allowed = key?.allowedModels
  if (allowed === undefined || allowed === null) return true
  return allowed.some((p) => (p.includes('*') ? globToRegExp(p).test(slug) : p === slug))
}

/** 403 `model_not_allowed` naming the model, unless the key may call it. */
export function assertModelAllowed(key: ApiKeyRecord | undefined, slug: string): void {
  if (!modelAllowed(key, slug)) {
    throw new GatewayError('model_not_allowed', `this API key may not call the model ${slug}`, {
      param: 'model',
    })
  }
}

const globs = new Map<string, RegExp>()
function globToRegExp(pattern: string): RegExp {
  let re = globs.get(pattern)
  if (!re) {
    const body = pattern
      .split('*')
      .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('.*')
    re = new RegExp(`^${body}$`)
    if (globs.size > 1000) globs.clear()
    globs.set(pattern, re)
  }
  return re
}

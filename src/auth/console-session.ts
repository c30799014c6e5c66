import { createHmac, randomBytes } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { GatewayError } from '../errors.ts'
import type { KeyLookup, Store } from '../store/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import { adminKeyMatcher } from './admin-key.ts'
import { hashKey } from './keys.ts'
import {
  checkSession,
  csrfToken,
  isCsrfToken,
  readCookie,
  signSession,
  type SessionClaims,
} from './session-token.ts'

// Console sessions: a key is exchanged once for a signed, short-lived token in an HttpOnly cookie,
// and that cookie (with the CSRF header on state-changing calls) is a credential of the API routes.
// Nothing is kept per session except a sign-out: it is counted in the rate-limit store under the
// session's id for one session lifetime, so every instance sharing that store refuses the token.

export const SESSION_COOKIE = 'junction_console'
export const CSRF_HEADER = 'x-csrf-token'

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

export interface ConsoleSessionsOptions {
  store: Store
  /** The admin key, when the admin API is on. */
  adminKey?: string
  secret: string | Buffer
  ttlMs: number
  signInsPerMinute: number
  now: () => number
}

export interface SignedIn {
  token: string
  claims: SessionClaims
  account: Account | null
  /** The key that signed in (an account's session). */
  key: ApiKeyRecord | null
}

/** What a session's cookie stands for: the operator, or an account's key (as a key in a header would). */
export interface SessionFound {
  claims: SessionClaims
  account: Account | null
  key: ApiKeyRecord | null
}

export interface ConsoleSessions {
  /** Exchanges a key for a session; one refusal (401 `invalid_api_key`) whatever is wrong with it. */
  signIn(key: string, clientAddress: string): Promise<SignedIn>
  /**
   * The session a request's cookie carries: null without the cookie or when the request carries a key
   * of its own (the key wins). A forged, expired or revoked session is a 401; a state-changing call
   * without the session's CSRF token a 403.
   */
  fromRequest(request: FastifyRequest): Promise<SessionFound | null>
  /**
   * The account and key of the request's session, for the /v1 routes (which then judge the key's role
   * as for a key sent in a header); null when the request has no session (see fromRequest).
   */
  keyFor(request: FastifyRequest): Promise<KeyLookup | null>
  /** Whether the request's session is the operator's (for the admin routes). */
  isAdmin(request: FastifyRequest): Promise<boolean>
  revoke(claims: SessionClaims): Promise<void>
  csrf(claims: SessionClaims): string
}

export function deriveSessionSecret(configured: string | undefined, signingKey: string): string | Buffer {
  return configured ?? createHmac('sha256', signingKey).update('junction console session').digest()
}

export function createConsoleSessions(o: ConsoleSessionsOptions): ConsoleSessions {
  const { store, secret, ttlMs } = o
  const isAdminKey = o.adminKey === undefined ? undefined : adminKeyMatcher(o.adminKey)
  const adminTag =
    o.adminKey === undefined
      ? undefined
      : createHmac('sha256', secret).update(`admin.${o.adminKey}`).digest('base64url').slice(0, 22)
  const revokedKey = (sid: string) => `console-signout:${sid}`

  const refuse = (): GatewayError => new GatewayError('invalid_api_key', 'invalid key')

  async function isRevoked(sid: string): Promise<boolean> {
    // Nothing is counted (amount 0); a sign-out counted 1 in this window or the one before.
    const r = await store.rateLimits.consume([{ key: revokedKey(sid), amount: 0, limit: 0 }], ttlMs, o.now())
    return !r.allowed
  }

  /** Whether a key may still be used: not disabled, not expired. */
  const usable = (key: ApiKeyRecord, now: number): boolean =>
    key.disabled !== true && (key.expiresAt === undefined || key.expiresAt === null || key.expiresAt > now)

  async function verify(token: string): Promise<SessionFound> {
    const claims = checkSession(secret, token, o.now())
    if (claims === 'invalid') {
      throw new GatewayError('invalid_session', 'invalid console session: sign in again')
    }
    if (claims === 'expired') {
      throw new GatewayError('session_expired', 'the console session has expired: sign in again')
    }
    if (await isRevoked(claims.sid)) {
      throw new GatewayError('invalid_session', 'the console session was signed out: sign in again')
    }
    if (claims.role === 'admin') {
      if (adminTag === undefined || claims.admin !== adminTag) {
        throw new GatewayError('invalid_session', 'invalid console session: sign in again')
      }
      return { claims, account: null, key: null }
    }
    // The key that signed in must still be usable: revoking, disabling or expiring it ends its sessions.
    const account = claims.account === undefined ? null : await store.accounts.get(claims.account)
    const key = account
      ? (await store.accounts.listKeys(account.id)).find((k) => k.id === claims.key)
      : undefined
    if (!account || !key || !usable(key, o.now())) {
      throw new GatewayError(
        'invalid_session',
        'the key of this console session was revoked, disabled or has expired: sign in again',
      )
    }
    return { claims, account, key }
  }

  const sessions: ConsoleSessions = {
    async signIn(key, clientAddress) {
      const limit = await store.rateLimits.consume(
        [{ key: `console-sign-in:${clientAddress}`, amount: 1, limit: o.signInsPerMinute }],
        60_000,
        o.now(),
      )
      if (!limit.allowed) {
        const d = limit.decisions[0]!
        throw new GatewayError('rate_limit_exceeded', 'too many sign-in attempts: wait a minute', {
          headers: { 'retry-after': String(Math.max(1, Math.ceil((d.resetAt - o.now()) / 1000))) },
        })
      }
      if (key.length === 0 || key.length > 512) throw refuse()
      const now = o.now()
      const base = { sid: randomBytes(18).toString('base64url'), iat: now, exp: now + ttlMs }
      if (isAdminKey?.(key) === true) {
        const claims: SessionClaims = { ...base, role: 'admin', admin: adminTag }
        return { token: signSession(secret, claims), claims, account: null, key: null }
      }
      const found = await store.accounts.findKey(hashKey(key))
      // A disabled or expired key is refused as an unknown one: the same answer whatever is wrong.
      if (!found || !usable(found.key, now)) throw refuse()
      const claims: SessionClaims = { ...base, role: 'account', account: found.account.id, key: found.key.id }
      return { token: signSession(secret, claims), claims, account: found.account, key: found.key }
    },

    async fromRequest(request) {
      if (request.headers.authorization !== undefined || request.headers['x-api-key'] !== undefined)
        return null
      const token = readCookie(request.headers.cookie, SESSION_COOKIE)
      if (token === undefined || token === '') return null
      const found = await verify(token)
      if (
        !SAFE_METHODS.has(request.method) &&
        !isCsrfToken(secret, found.claims.sid, request.headers[CSRF_HEADER])
      ) {
        throw new GatewayError(
          'invalid_csrf_token',
          `missing or wrong ${CSRF_HEADER} header for this session`,
        )
      }
      return found
    },

    async keyFor(request) {
      const found = await sessions.fromRequest(request)
      if (!found) return null
      if (!found.account || !found.key) {
        throw new GatewayError(
          'invalid_session',
          'an operator session has no account: use the admin routes or sign in with an account key',
        )
      }
      return { account: found.account, key: found.key }
    },

    async isAdmin(request) {
      const found = await sessions.fromRequest(request)
      return found?.claims.role === 'admin'
    },

    async revoke(claims) {
      await store.rateLimits.consume([{ key: revokedKey(claims.sid), amount: 1, limit: 1 }], ttlMs, o.now())
    },

    csrf(claims) {
      return csrfToken(secret, claims.sid)
    },
  }
  return sessions
}

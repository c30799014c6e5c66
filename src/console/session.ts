import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { hashKey } from '../config.ts'
import { GatewayError } from '../errors.ts'
import type { Account, Store } from '../store/types.ts'
import {
  csrfToken,
  isCsrfToken,
  readCookie,
  signSession,
  verifySession,
  type SessionClaims,
} from './token.ts'

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
}

export interface ConsoleSessions {
  /** Exchanges a key for a session; one refusal (401 `invalid_api_key`) whatever is wrong with it. */
  signIn(key: string, clientAddress: string): Promise<SignedIn>
  /**
   * The session a request's cookie carries: null without the cookie or when the request carries a key
   * of its own (the key wins). A forged, expired or revoked session is a 401; a state-changing call
   * without the session's CSRF token a 403.
   */
  fromRequest(request: FastifyRequest): Promise<{ claims: SessionClaims; account: Account | null } | null>
  /** The account of the request's session, for the /v1 routes; null when it has none (see fromRequest). */
  accountFor(request: FastifyRequest): Promise<Account | null>
  /** Whether the request's session is the operator's (for the admin routes). */
  isAdmin(request: FastifyRequest): Promise<boolean>
  revoke(claims: SessionClaims): Promise<void>
  csrf(claims: SessionClaims): string
}

export function deriveSessionSecret(configured: string | undefined, signingKey: string): string | Buffer {
  return configured ?? createHmac('sha256', signingKey).update('junction console session').digest()
}

const digest = (s: string): Buffer => createHash('sha256').update(s).digest()

export function createConsoleSessions(o: ConsoleSessionsOptions): ConsoleSessions {
  const { store, secret, ttlMs } = o
  const adminDigest = o.adminKey === undefined ? undefined : digest(o.adminKey)
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

  async function verify(token: string): Promise<{ claims: SessionClaims; account: Account | null }> {
    const claims = verifySession(secret, token)
    if (!claims) throw new GatewayError('invalid_session', 'invalid console session: sign in again')
    if (claims.exp <= o.now()) {
      throw new GatewayError('session_expired', 'the console session has expired: sign in again')
    }
    if (await isRevoked(claims.sid)) {
      throw new GatewayError('invalid_session', 'the console session was signed out: sign in again')
    }
    if (claims.role === 'admin') {
      if (adminTag === undefined || claims.admin !== adminTag) {
        throw new GatewayError('invalid_session', 'invalid console session: sign in again')
      }
      return { claims, account: null }
    }
    // The key that signed in must still be there: revoking it ends its sessions too.
    const account = claims.account === undefined ? null : await store.accounts.get(claims.account)
    const keys = account ? await store.accounts.listKeys(account.id) : []
    if (!account || !keys.some((k) => k.id === claims.key)) {
      throw new GatewayError('invalid_session', 'the key of this console session was revoked: sign in again')
    }
    return { claims, account }
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
      if (adminDigest && timingSafeEqual(digest(key), adminDigest)) {
        const claims: SessionClaims = { ...base, role: 'admin', admin: adminTag }
        return { token: signSession(secret, claims), claims, account: null }
      }
      const hash = hashKey(key)
      const account = await store.accounts.findByKeyHash(hash)
      const record = account
        ? (await store.accounts.listKeys(account.id)).find((k) => k.hash === hash)
        : undefined
      if (!account || !record) throw refuse()
      const claims: SessionClaims = { ...base, role: 'account', account: account.id, key: record.id }
      return { token: signSession(secret, claims), claims, account }
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

    async accountFor(request) {
      const found = await sessions.fromRequest(request)
      if (!found) return null
      if (!found.account) {
        throw new GatewayError(
          'invalid_session',
          'an operator session has no account: use the admin routes or sign in with an account key',
        )
      }
      return found.account
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

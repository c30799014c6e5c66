import { createHmac, timingSafeEqual } from 'node:crypto'

// The console's session token (a credential: see console-session.ts): `<payload>.<mac>`, both base64url, the MAC an HMAC-SHA256 of the
// payload under the session secret. Pure: the caller gives the secret and the clock.

export type SessionRole = 'account' | 'admin'

export interface SessionClaims {
  /** Random session id: what sign-out revokes and what the CSRF token is derived from. */
  sid: string
  role: SessionRole
  /** The account signed in (role `account`). */
  account?: string
  /** The id of the key that signed in (role `account`): the session ends when the key is revoked. */
  key?: string
  /** For role `admin`: a tag of the admin key in force, so changing the admin key ends its sessions. */
  admin?: string
  /** Unix ms. */
  iat: number
  exp: number
}

const mac = (secret: string | Buffer, data: string): Buffer =>
  createHmac('sha256', secret).update(data).digest()

export function signSession(secret: string | Buffer, claims: SessionClaims): string {
  const payload = Buffer.from(JSON.stringify(claims)).toString('base64url')
  return `${payload}.${mac(secret, payload).toString('base64url')}`
}

/** The claims of a token this secret signed, or null (malformed or forged); expiry is the caller's check. */
export function verifySession(secret: string | Buffer, token: string): SessionClaims | null {
  if (token.length > 2048) return null
  const dot = token.indexOf('.')
  if (dot <= 0) return null
  const payload = token.slice(0, dot)
  const given = Buffer.from(token.slice(dot + 1), 'base64url')
  const expected = mac(secret, payload)
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as SessionClaims
    if (typeof claims.sid !== 'string' || typeof claims.exp !== 'number') return null
    if (claims.role !== 'account' && claims.role !== 'admin') return null
    return claims
  } catch {
    return null
  }
}

/**
 * The claims of a token this secret signed and still valid at `nowMs`; `invalid` for a malformed or
 * forged token, `expired` for one past its `exp`. Pure.
 */
export function checkSession(
  secret: string | Buffer,
  token: string,
  nowMs: number,
): SessionClaims | 'invalid' | 'expired' {
  const claims = verifySession(secret, token)
  if (!claims) return 'invalid'
  return claims.exp <= nowMs ? 'expired' : claims
}

/** The CSRF token of a session: the page keeps it in memory and sends it on every state-changing call. */
export function csrfToken(secret: string | Buffer, sid: string): string {
  return mac(secret, `csrf.${sid}`).toString('base64url')
}

/** Constant-time comparison of a CSRF header with the session's token. */
export function isCsrfToken(secret: string | Buffer, sid: string, given: unknown): boolean {
  if (typeof given !== 'string' || given.length > 200) return false
  const a = Buffer.from(given)
  const b = Buffer.from(csrfToken(secret, sid))
  return a.length === b.length && timingSafeEqual(a, b)
}

/** A value of the Cookie header, by name (the first one), or undefined. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined
  for (const part of header.split(';')) {
    const eq = part.indexOf('=')
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim()
  }
  return undefined
}

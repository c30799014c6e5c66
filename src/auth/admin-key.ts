import { createHash, timingSafeEqual } from 'node:crypto'
import type { FastifyRequest } from 'fastify'
import { GatewayError } from '../errors.ts'
import { bearer } from './keys.ts'

// The operator's admin key (GATEWAY_ADMIN_KEY): the bearer of the admin API, the operator routes and
// /metrics. Compared by SHA-256 digest, so the comparison is constant-time whatever was sent.

const digest = (s: string): Buffer => createHash('sha256').update(s).digest()

/** Whether a key is the admin key. Digests have equal length, so the comparison is constant-time. */
export function adminKeyMatcher(adminKey: string): (key: string) => boolean {
  const expected = digest(adminKey)
  return (key) => timingSafeEqual(digest(key), expected)
}

/**
 * A check of `Authorization` headers against the admin key: true only for `Bearer <the admin key>`.
 * Pure: the key is given, the header is the only input.
 */
export function adminKeyCheck(adminKey: string): (authorization: string | undefined) => boolean {
  const isAdminKey = adminKeyMatcher(adminKey)
  return (authorization) => {
    const m = bearer.exec(authorization ?? '')
    return m?.[1] !== undefined && m[1] !== '' && isAdminKey(m[1])
  }
}

/** An onRequest hook that lets only the admin key through (401 `invalid_admin_key` otherwise). */
export function requireAdminKey(adminKey: string): (request: FastifyRequest) => Promise<void> {
  const isAdminKey = adminKeyCheck(adminKey)
  return async (request) => {
    if (!isAdminKey(request.headers.authorization)) {
      throw new GatewayError('invalid_admin_key', 'a valid admin key is required')
    }
  }
}

/** requireAdminKey, or another credential of the operator (`allow`: the console's session) first. */
export function requireOperator(
  adminKey: string,
  allow?: (request: FastifyRequest) => Promise<boolean>,
): (request: FastifyRequest) => Promise<void> {
  const checkAdminKey = requireAdminKey(adminKey)
  return async (request) => {
    if (allow && (await allow(request))) return
    await checkAdminKey(request)
  }
}

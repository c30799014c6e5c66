import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { GatewayError } from '../errors.ts'

// Signed output URLs (docs/design/decisions.md, Predictions): `GET /v1/outputs/{id}?expires=…&signature=…`,
// signed with HMAC-SHA256 over the id and the expiry, so they work without a bearer header and stop
// working after expiry. Pure: the signing key and the clock are arguments.

/** A random signing key, used when the configuration gives none (kept in the store, shared). */
export function newSigningKey(): string {
  return randomBytes(32).toString('base64url')
}

/** The URL signature of output `id` valid until `expires` (unix seconds). Pure. */
export function signOutput(key: string, id: string, expires: number): string {
  return createHmac('sha256', key).update(`${id}.${expires}`).digest('base64url')
}

export type OutputUrlCheck = 'ok' | 'expired' | 'invalid'

/** Whether a URL's `expires` and `signature` are the gateway's and still valid at `nowMs`. Pure. */
export function checkOutputSignature(
  key: string,
  id: string,
  expires: string | undefined,
  signature: string | undefined,
  nowMs: number,
): OutputUrlCheck {
  if (expires === undefined || signature === undefined || !/^\d{1,12}$/.test(expires)) return 'invalid'
  const expected = Buffer.from(signOutput(key, id, Number(expires)))
  const given = Buffer.from(signature)
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return 'invalid'
  // Checked after the signature, so an attacker learns nothing from changing `expires`.
  return Number(expires) * 1000 > nowMs ? 'ok' : 'expired'
}

/**
 * checkOutputSignature as the route answers it: a tampered or foreign signature is a 403
 * `invalid_signature`, an expired URL a 403 `url_expired`.
 */
export function assertOutputSignature(
  key: string,
  id: string,
  expires: string | undefined,
  signature: string | undefined,
  nowMs: number,
): void {
  const check = checkOutputSignature(key, id, expires, signature, nowMs)
  if (check === 'invalid') throw new GatewayError('invalid_signature', 'this output URL is not valid')
  if (check === 'expired') {
    throw new GatewayError(
      'url_expired',
      'this output URL has expired; look the prediction up again for a new one',
    )
  }
}

/** `{origin}/v1/outputs/{id}?expires=…&signature=…` valid for `ttlMs` from `nowMs`. */
export function outputUrl(key: string, origin: string, id: string, nowMs: number, ttlMs: number): string {
  const expires = Math.floor((nowMs + ttlMs) / 1000)
  return `${origin}/v1/outputs/${id}?expires=${expires}&signature=${signOutput(key, id, expires)}`
}

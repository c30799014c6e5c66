import { createHmac, randomBytes } from 'node:crypto'

// Standard Webhooks signing (https://www.standardwebhooks.com/, spec.md "Signature scheme"): the
// secret is `whsec_` + base64 of the key bytes, and the signature is HMAC-SHA256 over
// `<webhook-id>.<webhook-timestamp>.<body>` keyed with those decoded bytes, not with the string.
// Receivers verify with their stock library, so every byte of this format matters.

const PREFIX = 'whsec_'
/** The spec asks for keys of 24 to 64 bytes. */
const MIN_KEY_BYTES = 24
const MAX_KEY_BYTES = 64
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/

/** `v1,<base64 signature>` for the `webhook-signature` header; `timestamp` is in Unix seconds. */
export function signWebhook(secret: string, id: string, timestamp: number, body: string): string {
  const key = decodeSecret(secret)
  const mac = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`, 'utf8').digest('base64')
  return `v1,${mac}`
}

/** A fresh account secret: 24 random bytes, the spec's minimum and what its reference tools issue. */
export function generateWebhookSecret(): string {
  return PREFIX + randomBytes(MIN_KEY_BYTES).toString('base64')
}

/** Whether `s` is `whsec_` followed by canonical base64 of 24 to 64 bytes. */
export function isWebhookSecret(s: string): boolean {
  if (!s.startsWith(PREFIX)) return false
  const b64 = s.slice(PREFIX.length)
  // Buffer.from(…, 'base64') skips characters it does not know instead of failing: check first.
  if (b64.length === 0 || !BASE64.test(b64)) return false
  const n = Buffer.from(b64, 'base64').length
  return n >= MIN_KEY_BYTES && n <= MAX_KEY_BYTES
}

function decodeSecret(secret: string): Buffer {
  // A malformed secret would otherwise sign with whatever bytes survive lenient decoding, and every
  // receiver would reject the deliveries with no hint why.
  if (!isWebhookSecret(secret)) throw new Error('webhook secret is not whsec_ + base64 of 24 to 64 bytes')
  return Buffer.from(secret.slice(PREFIX.length), 'base64')
}

import { createHmac, timingSafeEqual } from 'node:crypto'
import { describe, expect, it } from 'vitest'
import {
  generateWebhookSecret,
  isWebhookSecret,
  signWebhook,
} from '../../../src/predictions/webhook-signing.ts'

// A receiver's verification written from the Standard Webhooks spec, independently of the code under
// test: HMAC-SHA256 keyed with the decoded secret bytes over `id.timestamp.body`.
function verify(secret: string, id: string, timestamp: number, body: string, header: string): boolean {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64')
  const expected = createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest()
  return header.split(' ').some((entry) => {
    const [version, sig] = entry.split(',')
    if (version !== 'v1' || sig === undefined) return false
    const given = Buffer.from(sig, 'base64')
    return given.length === expected.length && timingSafeEqual(given, expected)
  })
}

describe('signWebhook', () => {
  it('reproduces the Standard Webhooks reference vector', () => {
    // Published with the reference libraries (standard-webhooks, svix).
    expect(
      signWebhook(
        'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
        'msg_p5jXN8AQM9LWM0D4loKWxJek',
        1614265330,
        '{"test": 2432232314}',
      ),
    ).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=')
  })

  it('is verified by an independent implementation, and tampering breaks it', () => {
    const secret = generateWebhookSecret()
    const id = 'msg_0123456789abcdef0123456789abcdef'
    const body = '{"id":"0123456789abcdef0123456789abcdef","status":"success","output":["https://x/y"]}'
    const header = signWebhook(secret, id, 1_700_000_000, body)
    expect(header).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/)
    expect(verify(secret, id, 1_700_000_000, body, header)).toBe(true)
    expect(verify(secret, id, 1_700_000_000, body.replace('success', 'failed'), header)).toBe(false)
    expect(verify(secret, id, 1_700_000_001, body, header)).toBe(false)
    expect(verify(secret, 'msg_other', 1_700_000_000, body, header)).toBe(false)
    expect(verify(generateWebhookSecret(), id, 1_700_000_000, body, header)).toBe(false)
  })

  it('signs non-ASCII bodies as UTF-8', () => {
    const secret = generateWebhookSecret()
    const body = '{"prompt":"café ☕ 日本"}'
    expect(verify(secret, 'msg_1', 1, body, signWebhook(secret, 'msg_1', 1, body))).toBe(true)
  })

  it('refuses a malformed secret instead of signing with garbage', () => {
    expect(() => signWebhook('not-a-secret', 'msg_1', 1, '{}')).toThrow(/whsec_/)
    expect(() => signWebhook('whsec_c2hvcnQ=', 'msg_1', 1, '{}')).toThrow(/whsec_/)
  })
})

describe('generateWebhookSecret', () => {
  it('is whsec_ + base64 of 24 random bytes, different every time', () => {
    const a = generateWebhookSecret()
    const b = generateWebhookSecret()
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/)
    expect(Buffer.from(a.slice(6), 'base64')).toHaveLength(24)
    expect(a).not.toBe(b)
    expect(isWebhookSecret(a)).toBe(true)
  })
})

describe('isWebhookSecret', () => {
  it('accepts base64 keys of 24 to 64 bytes after whsec_', () => {
    expect(isWebhookSecret('whsec_' + Buffer.alloc(24, 1).toString('base64'))).toBe(true)
    expect(isWebhookSecret('whsec_' + Buffer.alloc(64, 2).toString('base64'))).toBe(true)
    expect(isWebhookSecret('whsec_' + Buffer.alloc(32, 3).toString('base64'))).toBe(true)
  })

  it('refuses a missing prefix, wrong sizes and characters outside base64', () => {
    const key = Buffer.alloc(24, 1).toString('base64')
    expect(isWebhookSecret(key)).toBe(false)
    expect(isWebhookSecret('whsk_' + key)).toBe(false)
    expect(isWebhookSecret('whsec_')).toBe(false)
    expect(isWebhookSecret('whsec_' + Buffer.alloc(23, 1).toString('base64'))).toBe(false)
    expect(isWebhookSecret('whsec_' + Buffer.alloc(65, 1).toString('base64'))).toBe(false)
    expect(isWebhookSecret('whsec_' + key.slice(0, -1) + '!')).toBe(false)
    expect(isWebhookSecret('whsec_' + key + ' ')).toBe(false)
    expect(isWebhookSecret('whsec_' + Buffer.alloc(24, 0xfb).toString('base64url'))).toBe(false)
  })
})

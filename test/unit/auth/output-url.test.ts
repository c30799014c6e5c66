import { describe, expect, it } from 'vitest'
import {
  assertOutputSignature,
  checkOutputSignature,
  outputUrl,
  signOutput,
} from '../../../src/auth/output-url.ts'

const KEY = 'signing-key'
const NOW = 1_700_000_000_000

/** The `expires` and `signature` of a URL outputUrl made. */
function parts(url: string): { id: string; expires: string; signature: string } {
  const u = new URL(url)
  return {
    id: u.pathname.split('/').pop()!,
    expires: u.searchParams.get('expires')!,
    signature: u.searchParams.get('signature')!,
  }
}

describe('signed output URLs', () => {
  it('a URL the gateway signed is valid until it expires', () => {
    const url = outputUrl(KEY, 'https://gw.example', 'out_abc', NOW, 60_000)
    expect(url).toMatch(/^https:\/\/gw\.example\/v1\/outputs\/out_abc\?expires=\d+&signature=[\w-]+$/)
    const { id, expires, signature } = parts(url)
    expect(Number(expires)).toBe(Math.floor((NOW + 60_000) / 1000))
    expect(signature).toBe(signOutput(KEY, id, Number(expires)))
    expect(checkOutputSignature(KEY, id, expires, signature, NOW)).toBe('ok')
    expect(() => assertOutputSignature(KEY, id, expires, signature, NOW)).not.toThrow()
  })

  it('an expired URL is 403 url_expired', () => {
    const { id, expires, signature } = parts(outputUrl(KEY, 'http://h', 'out_abc', NOW, 60_000))
    const later = NOW + 60_000
    expect(checkOutputSignature(KEY, id, expires, signature, later)).toBe('expired')
    expect(() => assertOutputSignature(KEY, id, expires, signature, later)).toThrow(
      expect.objectContaining({ status: 403, code: 'url_expired' }),
    )
  })

  it('a tampered id, expiry or signature, or another key, is 403 invalid_signature', () => {
    const { id, expires, signature } = parts(outputUrl(KEY, 'http://h', 'out_abc', NOW, 60_000))
    const invalid = expect.objectContaining({ status: 403, code: 'invalid_signature' })
    expect(checkOutputSignature(KEY, 'out_abd', expires, signature, NOW)).toBe('invalid')
    expect(checkOutputSignature(KEY, id, String(Number(expires) + 3600), signature, NOW)).toBe('invalid')
    // A later expiry on an expired URL is still the signature's failure, not an expiry.
    expect(checkOutputSignature(KEY, id, String(Number(expires) + 1), signature, NOW + 120_000)).toBe(
      'invalid',
    )
    expect(checkOutputSignature(KEY, id, expires, `${signature.slice(0, -1)}A`, NOW)).toBe('invalid')
    expect(checkOutputSignature('other-key', id, expires, signature, NOW)).toBe('invalid')
    expect(() => assertOutputSignature(KEY, id, expires, `x${signature}`, NOW)).toThrow(invalid)
  })

  it('a missing or malformed parameter is invalid', () => {
    const { id, expires, signature } = parts(outputUrl(KEY, 'http://h', 'out_abc', NOW, 60_000))
    expect(checkOutputSignature(KEY, id, undefined, signature, NOW)).toBe('invalid')
    expect(checkOutputSignature(KEY, id, expires, undefined, NOW)).toBe('invalid')
    expect(checkOutputSignature(KEY, id, `${expires}.0`, signature, NOW)).toBe('invalid')
    expect(checkOutputSignature(KEY, id, '1'.repeat(13), signature, NOW)).toBe('invalid')
  })
})

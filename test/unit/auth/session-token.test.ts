import { describe, expect, it } from 'vitest'
import {
  checkSession,
  csrfToken,
  isCsrfToken,
  readCookie,
  signSession,
  verifySession,
  type SessionClaims,
} from '../../../src/auth/session-token.ts'

const claims: SessionClaims = { sid: 's1', role: 'account', account: 'acme', key: 'key_1', iat: 1, exp: 2 }

describe('console session tokens', () => {
  it('round-trip under the same secret only', () => {
    const token = signSession('secret-one', claims)
    expect(verifySession('secret-one', token)).toEqual(claims)
    expect(verifySession('secret-two', token)).toBeNull()
  })

  it('refuse a changed payload, a cut MAC, garbage and over-long tokens', () => {
    const token = signSession('k', claims)
    const [payload, mac] = token.split('.') as [string, string]
    const changed = Buffer.from(JSON.stringify({ ...claims, account: 'other' })).toString('base64url')
    expect(verifySession('k', `${changed}.${mac}`)).toBeNull()
    expect(verifySession('k', `${payload}.${mac.slice(2)}`)).toBeNull()
    expect(verifySession('k', 'no-dot')).toBeNull()
    expect(verifySession('k', `.${mac}`)).toBeNull()
    expect(verifySession('k', `${payload}.${mac}${'A'.repeat(3000)}`)).toBeNull()
    // Signed but not a session: no role, or an unknown one.
    const { role: _role, ...roleless } = claims
    expect(verifySession('k', signSession('k', roleless as SessionClaims))).toBeNull()
    expect(verifySession('k', signSession('k', { ...claims, role: 'root' as 'admin' }))).toBeNull()
  })

  it('check a session at a time: valid before its exp, expired from it, invalid when tampered', () => {
    const token = signSession('k', claims)
    expect(checkSession('k', token, 1)).toEqual(claims)
    expect(checkSession('k', token, 2)).toBe('expired')
    expect(checkSession('k', token, 3)).toBe('expired')
    const [payload, mac] = token.split('.') as [string, string]
    const longer = Buffer.from(JSON.stringify({ ...claims, exp: 99 })).toString('base64url')
    expect(checkSession('k', `${longer}.${mac}`, 1)).toBe('invalid')
    expect(checkSession('k', `${payload}.${mac.slice(1)}A`, 1)).toBe('invalid')
    expect(checkSession('other', token, 1)).toBe('invalid')
    // A forged token is invalid even past its claimed expiry: the signature is checked first.
    expect(checkSession('other', token, 3)).toBe('invalid')
  })

  it('derive one CSRF token per session, compared in constant time', () => {
    const t = csrfToken('k', 's1')
    expect(t).toBe(csrfToken('k', 's1'))
    expect(t).not.toBe(csrfToken('k', 's2'))
    expect(isCsrfToken('k', 's1', t)).toBe(true)
    expect(isCsrfToken('k', 's2', t)).toBe(false)
    expect(isCsrfToken('k', 's1', undefined)).toBe(false)
    expect(isCsrfToken('k', 's1', [t])).toBe(false)
    expect(isCsrfToken('k', 's1', `${t}x`)).toBe(false)
  })

  it('read a cookie by name among others', () => {
    expect(readCookie('a=1; junction_console=v.w; b=2', 'junction_console')).toBe('v.w')
    expect(readCookie('xjunction_console=1', 'junction_console')).toBeUndefined()
    expect(readCookie(undefined, 'junction_console')).toBeUndefined()
  })
})

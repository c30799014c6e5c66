import type { FastifyRequest } from 'fastify'
import { describe, expect, it } from 'vitest'
import {
  adminKeyCheck,
  adminKeyMatcher,
  requireAdminKey,
  requireOperator,
} from '../../../src/auth/admin-key.ts'
import { GatewayError } from '../../../src/errors.ts'

const withAuth = (authorization?: string): FastifyRequest =>
  ({ headers: authorization === undefined ? {} : { authorization } }) as FastifyRequest

describe('the admin key', () => {
  it('accepts the bearer of the admin key, whatever the scheme case and trailing space', () => {
    const isAdminKey = adminKeyCheck('adm-secret')
    expect(isAdminKey('Bearer adm-secret')).toBe(true)
    expect(isAdminKey('bearer adm-secret  ')).toBe(true)
  })

  it('refuses another key, a prefix of it, another scheme and no header', () => {
    const isAdminKey = adminKeyCheck('adm-secret')
    expect(isAdminKey('Bearer adm-secreT')).toBe(false)
    expect(isAdminKey('Bearer adm-secre')).toBe(false)
    expect(isAdminKey('Bearer adm-secret-and-more')).toBe(false)
    expect(isAdminKey('Basic adm-secret')).toBe(false)
    expect(isAdminKey('adm-secret')).toBe(false)
    expect(isAdminKey('Bearer ')).toBe(false)
    expect(isAdminKey(undefined)).toBe(false)
  })

  it('a key (the console signs in with one) matches the admin key only when equal', () => {
    const isAdminKey = adminKeyMatcher('adm-secret')
    expect(isAdminKey('adm-secret')).toBe(true)
    expect(isAdminKey('adm-secret ')).toBe(false)
    expect(isAdminKey('')).toBe(false)
    expect(isAdminKey('x'.repeat(10_000))).toBe(false)
  })

  it('as a hook: lets the admin key through, refuses anything else with 401 invalid_admin_key', async () => {
    const hook = requireAdminKey('adm-secret')
    await expect(hook(withAuth('Bearer adm-secret'))).resolves.toBeUndefined()
    const refused = await hook(withAuth('Bearer sk-dev')).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(GatewayError)
    expect(refused).toMatchObject({ status: 401, code: 'invalid_admin_key' })
    await expect(hook(withAuth())).rejects.toMatchObject({ code: 'invalid_admin_key' })
  })

  it('an operator is the admin key or the other credential allowed first', async () => {
    const allowed = requireOperator('adm-secret', async () => true)
    await expect(allowed(withAuth())).resolves.toBeUndefined()
    const notAllowed = requireOperator('adm-secret', async () => false)
    await expect(notAllowed(withAuth('Bearer adm-secret'))).resolves.toBeUndefined()
    await expect(notAllowed(withAuth('Bearer nope'))).rejects.toMatchObject({ code: 'invalid_admin_key' })
    await expect(requireOperator('adm-secret')(withAuth())).rejects.toMatchObject({
      code: 'invalid_admin_key',
    })
  })
})

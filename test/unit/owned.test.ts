import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../src/errors.ts'
import { owned } from '../../src/owned.ts'

// Another account's id is answered exactly as an unknown one (decisions.md: 404, never 403).

const notFound = () => new GatewayError('file_not_found', 'no file "file-x"')

describe('owned', () => {
  it("returns the owner's record", () => {
    const r = { accountId: 'a', id: 'file-x' }
    expect(owned('a', r, notFound)).toBe(r)
  })

  it("throws the same not-found error for a missing record and another account's", () => {
    const missing = (() => {
      try {
        return owned('a', null, notFound)
      } catch (e) {
        return e
      }
    })()
    const foreign = (() => {
      try {
        return owned('a', { accountId: 'b', id: 'file-x' }, notFound)
      } catch (e) {
        return e
      }
    })()
    expect(missing).toBeInstanceOf(GatewayError)
    expect(foreign).toEqual(missing)
    expect((foreign as GatewayError).status).toBe(404)
  })
})

import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import type { GatewayError } from '../../../src/errors.ts'
import { parseQuery } from '../../../src/schemas/query.ts'

const page = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  purpose: z.enum(['assistants', 'vision']).optional(),
})

const refusal = (query: unknown): GatewayError => {
  try {
    parseQuery(page, query)
  } catch (e) {
    return e as GatewayError
  }
  throw new Error('accepted')
}

describe('parseQuery', () => {
  it('coerces and applies defaults; no query string is {}', () => {
    expect(parseQuery(page, { limit: '7', purpose: 'vision' })).toEqual({ limit: 7, purpose: 'vision' })
    expect(parseQuery(page, undefined)).toEqual({ limit: 50 })
  })

  it('refuses with a 400 naming the parameter', () => {
    expect(refusal({ limit: '0' })).toMatchObject({ status: 400, code: 'invalid_value', param: 'limit' })
    expect(refusal({ purpose: 'batch' })).toMatchObject({ status: 400, param: 'purpose' })
    // A parameter given twice arrives as an array.
    expect(refusal({ purpose: ['vision', 'assistants'] })).toMatchObject({ status: 400, param: 'purpose' })
  })
})

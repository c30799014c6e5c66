import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { createBodyBudget, formatDeepPath, parseJsonBody, scanJson } from '../../../src/http/json-body.ts'
import { thrownGatewayError } from '../../support/errors.ts'

describe('scanJson', () => {
  it('finds the path of the first container past the limit', () => {
    expect(scanJson('{"a":{"b":{}}}', 2).tooDeep).toEqual(['a', 'b'])
    expect(scanJson('{"a":{"b":{}}}', 3).tooDeep).toBeNull()
    expect(scanJson('[1,[2],[3,[4]]]', 2).tooDeep).toEqual([2, 1])
    expect(scanJson('{"x":1,"y":[{"z":[[]]}]}', 4).tooDeep).toEqual(['y', 0, 'z', 0])
  })

  it('ignores brackets, quotes and backslashes inside strings', () => {
    expect(scanJson('{"a":"[[[{{{","b":"\\"[[[","c":"\\\\"}', 1).tooDeep).toBeNull()
    expect(scanJson('{"a\\"[":{"b":[]}}', 2).tooDeep).toEqual(['a"[', 'b'])
  })

  it('decodes escaped keys and flags __proto__ and constructor keys however written', () => {
    expect(scanJson('{"\\u0061":[[]]}', 2).tooDeep).toEqual(['a', 0])
    expect(scanJson('{"__proto__":1}', 5).suspectKeys).toBe(true)
    expect(scanJson('{"\\u005f_proto__":1}', 5).suspectKeys).toBe(true)
    expect(scanJson('{"a":"__proto__"}', 5).suspectKeys).toBe(false)
    expect(scanJson('{"constructor":1}', 5).suspectKeys).toBe(true)
  })

  it('scans a million levels without recursion', () => {
    expect(scanJson('['.repeat(1_000_000), 64).tooDeep).toHaveLength(64)
  })
})

describe('formatDeepPath', () => {
  it('keeps the first eight segments and shortens long keys', () => {
    expect(formatDeepPath(['a', 0, 'b'])).toBe('a[0].b')
    expect(
      formatDeepPath(['tools', 0, 'function', 'parameters', 'properties', 'a', 'properties', 'a', 'x']),
    ).toBe('tools[0].function.parameters.properties.a.properties.a.…')
    expect(formatDeepPath(['k'.repeat(100)])).toBe(`${'k'.repeat(40)}…`)
    expect(formatDeepPath([])).toBeNull()
  })
})

describe('parseJsonBody', () => {
  it('parses JSON, with or without a byte order mark', () => {
    expect(parseJsonBody('{"a":[1,{"b":null}]}', 64)).toEqual({ a: [1, { b: null }] })
    expect(parseJsonBody('\ufeff[1]', 64)).toEqual([1])
  })

  it('refuses empty, invalid and too-deep bodies with the envelope codes', () => {
    expect(thrownGatewayError(() => parseJsonBody('', 64))).toMatchObject({
      code: 'invalid_json',
      param: null,
    })
    expect(thrownGatewayError(() => parseJsonBody('{"a":', 64))).toMatchObject({ code: 'invalid_json' })
    expect(thrownGatewayError(() => parseJsonBody('{"a":[[]]}', 2))).toMatchObject({
      status: 400,
      code: 'too_deep',
      param: 'a[0]',
    })
    // Too deep is found before validity: the text is never parsed.
    expect(thrownGatewayError(() => parseJsonBody('[[[[', 2))).toMatchObject({
      code: 'too_deep',
      param: '[0][0]',
    })
  })

  it("refuses prototype poisoning as Fastify's parser did, naming the key", () => {
    expect(thrownGatewayError(() => parseJsonBody('{"a":[{"__proto__":{"x":1}}]}', 64))).toMatchObject({
      code: 'invalid_value',
      param: 'a[0].__proto__',
    })
    expect(
      thrownGatewayError(() => parseJsonBody('{"constructor":{"prototype":{"x":1}}}', 64)),
    ).toMatchObject({ code: 'invalid_value', param: 'constructor' })
    // A property named constructor (a JSON schema may have one) is fine.
    expect(parseJsonBody('{"properties":{"constructor":{"type":"string"}}}', 64)).toEqual({
      properties: { constructor: { type: 'string' } },
    })
  })
})

describe('createBodyBudget', () => {
  it('counts bytes up to the bound and refuses past it', () => {
    const budget = createBodyBudget(10)
    expect(budget.take('a', 6)).toBe('ok')
    expect(budget.take('b', 5)).toBe('full')
    expect(budget.held).toBe(6)
    budget.release('a', 6)
    expect(budget.take('b', 10)).toBe('ok')
    expect(budget.held).toBe(10)
  })

  it("holds each account to its share, and another account's bytes still fit", () => {
    const budget = createBodyBudget(100, 40)
    expect(budget.take('a', 30)).toBe('ok')
    expect(budget.take('a', 11)).toBe('account')
    expect(budget.take('a', 10)).toBe('ok')
    expect(budget.heldBy('a')).toBe(40)
    expect(budget.take('b', 40)).toBe('ok')
    expect(budget.take('c', 21)).toBe('full')
    expect(budget.take('c', 20)).toBe('ok')
    expect(budget.held).toBe(100)
    budget.release('a', 40)
    expect(budget.heldBy('a')).toBe(0)
    expect(budget.held).toBe(60)
  })
})

it('throws GatewayErrors only', () => {
  expect(() => parseJsonBody('nope', 64)).toThrow(GatewayError)
})

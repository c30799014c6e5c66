import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import {
  withinLimits,
  MAX_ARRAY_ITEMS,
  MAX_CONTAINERS,
  MAX_OBJECT_KEYS,
  VALUES_PER_CHECKPOINT,
  createBodyBudget,
  formatDeepPath,
  parseJsonBody,
  parseJsonBodyInTurns,
  parseJsonSteps,
} from '../../../src/http/json-body.ts'
import { thrownGatewayError } from '../../support/errors.ts'

const deepParam = (text: string, maxDepth: number): string | null =>
  thrownGatewayError(() => parseJsonBody(text, maxDepth)).param ?? null

describe('parseJsonBody: limits', () => {
  it('names the first container past the depth limit', () => {
    expect(deepParam('{"a":{"b":{}}}', 2)).toBe('a.b')
    expect(parseJsonBody('{"a":{"b":{}}}', 3)).toEqual({ a: { b: {} } })
    expect(deepParam('[1,[2],[3,[4]]]', 2)).toBe('[2][1]')
    expect(deepParam('{"x":1,"y":[{"z":[[]]}]}', 4)).toBe('y[0].z[0]')
  })

  it('ignores brackets, quotes and backslashes inside strings', () => {
    const text = '{"a":"[[[{{{","b":"\\"[[[","c":"\\\\"}'
    expect(parseJsonBody(text, 1)).toEqual(JSON.parse(text))
    expect(deepParam('{"a\\"[":{"b":[]}}', 2)).toBe('a"[.b')
  })

  it('decodes escaped keys, and refuses __proto__ however written', () => {
    expect(deepParam('{"\\u0061":[[]]}', 2)).toBe('a[0]')
    expect(deepParam('{"\\u005f_proto__":1}', 5)).toBe('__proto__')
    expect(parseJsonBody('{"a":"__proto__","constructor":1}', 5)).toEqual({ a: '__proto__', constructor: 1 })
  })

  it('stops at the limit a million levels in, without recursion', () => {
    expect(deepParam('['.repeat(1_000_000), 64)).toMatch(/^\[0\]/)
  })

  it('refuses an object of more than maxKeys keys, naming it, and takes exactly maxKeys', () => {
    const wide = (n: number) =>
      JSON.stringify({ a: [Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i]))] })
    expect(parseJsonBody(wide(5), 64, { maxKeys: 5 })).toEqual(JSON.parse(wide(5)))
    expect(thrownGatewayError(() => parseJsonBody(wide(6), 64, { maxKeys: 5 }))).toMatchObject({
      code: 'invalid_value',
      param: 'a[0]',
      message: 'a[0] has more than 5 keys',
    })
    expect(thrownGatewayError(() => parseJsonBody(wide(MAX_OBJECT_KEYS + 1), 64))).toMatchObject({
      param: 'a[0]',
    })
    expect(thrownGatewayError(() => parseJsonBody('{"a":1,"b":2}', 64, { maxKeys: 1 })).message).toBe(
      'the body has more than 1 keys',
    )
  })

  it('refuses an array of more than maxItems items, naming it, and takes exactly maxItems', () => {
    const list = (n: number) => JSON.stringify({ a: { b: Array(n).fill(0) } })
    expect(parseJsonBody(list(5), 64, { maxItems: 5 })).toEqual(JSON.parse(list(5)))
    expect(thrownGatewayError(() => parseJsonBody(list(6), 64, { maxItems: 5 }))).toMatchObject({
      code: 'invalid_value',
      param: 'a.b',
      message: 'a.b has more than 5 items',
    })
    expect(parseJsonBody(JSON.stringify(Array(MAX_ARRAY_ITEMS).fill(1)), 64)).toHaveLength(MAX_ARRAY_ITEMS)
    const over = JSON.stringify(Array(MAX_ARRAY_ITEMS + 1).fill(1))
    expect(thrownGatewayError(() => parseJsonBody(over, 64)).message).toBe(
      `the body has more than ${MAX_ARRAY_ITEMS} items`,
    )
  })

  it('refuses more than maxContainers objects and arrays in all, naming the top-level field', () => {
    // n in all: the body, b, [{}], its {}, and an array of n - 5 objects.
    const text = (n: number) => JSON.stringify({ a: 1, b: [[{}], Array(n - 5).fill({})] })
    expect(parseJsonBody(text(10), 64, { maxContainers: 10 })).toEqual(JSON.parse(text(10)))
    expect(thrownGatewayError(() => parseJsonBody(text(11), 64, { maxContainers: 10 }))).toMatchObject({
      code: 'invalid_value',
      param: 'b',
      message: 'request body holds more than 10 objects and arrays (past it in b)',
    })
    const many = JSON.stringify({ extra: Array(MAX_CONTAINERS).fill([]) })
    expect(thrownGatewayError(() => parseJsonBody(many, 64))).toMatchObject({ param: 'extra' })
  })
})

describe('parseJsonBody: the same value as JSON.parse', () => {
  const valid = [
    '0',
    '-0',
    '1e309',
    '-1.5E-3',
    '123456789012345678901234567890',
    'true',
    'false',
    'null',
    '""',
    ' \t\r\n[ ]\n',
    '{}',
    '{ }',
    '[[], {}, [{}]]',
    '{"a":1,"a":2}',
    '"\\u00e9\\n\\"\\\\\\/"',
    '"\\ud83d\\ude00 😀"',
    '{"constructor":{"type":"string"}}',
    '[1,2.5,-3e2,"x",null,true,{"k":[false]}]',
    '{"toString":1,"hasOwnProperty":2,"valueOf":{}}',
  ]
  it.each(valid)('%s', (text) => {
    const parsed = parseJsonBody(text, 64)
    expect(parsed).toEqual(JSON.parse(text))
    expect(JSON.stringify(parsed)).toBe(JSON.stringify(JSON.parse(text)))
  })

  const invalid = [
    '[1,]',
    '{"a":1,}',
    '{"a" 1}',
    '{a:1}',
    "{'a':1}",
    '[01]',
    '[1.]',
    '[.5]',
    '[-]',
    '[+1]',
    '[1e]',
    'tru',
    'nul',
    '[1 2]',
    '{"a":1}}',
    '{"a":1} x',
    '[',
    '{"a":',
    '"abc',
    '"a\tb"',
    '"\\x41"',
    'undefined',
    '[NaN]',
    '{"a":1 "b":2}',
    ',',
    ':',
    '"\\u12"',
  ]
  it.each(invalid)('refuses %s as invalid_json, as JSON.parse does', (text) => {
    expect(() => JSON.parse(text)).toThrow()
    expect(thrownGatewayError(() => parseJsonBody(text, 64))).toMatchObject({ code: 'invalid_json' })
  })

  it('matches JSON.parse on a wide, mixed body', () => {
    const body = {
      model: 'mock/chat',
      messages: Array.from({ length: 3000 }, (_, i) => ({ role: 'user', content: `m${i} é "q" \\ \n` })),
      tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
      n: [0, -1, 1.25, 1e21, null, true, false],
    }
    const text = JSON.stringify(body, null, 1)
    expect(parseJsonBody(text, 64)).toStrictEqual(JSON.parse(text))
  })
})

describe('parseJsonSteps: sliced', () => {
  const wideText = JSON.stringify({ extra: Array.from({ length: 100_000 }, () => ({})) })

  it('reaches a checkpoint every VALUES_PER_CHECKPOINT values', () => {
    const work = parseJsonSteps(wideText, { maxDepth: 64, maxContainers: Infinity })
    let checkpoints = 0
    for (let step = work.next(); !step.done; step = work.next()) checkpoints++
    expect(checkpoints).toBe(Math.floor(100_002 / VALUES_PER_CHECKPOINT))
  })

  it('gives the event loop a turn whenever a turn has lasted turnMs, and builds the same value', async () => {
    let clock = 0
    let turns = 0
    let immediates = 0
    const ticking = setInterval(() => {}, 1_000)
    const counter = (): void => {
      immediates++
      if (immediates < 1_000) setImmediate(counter)
    }
    setImmediate(counter)
    const value = await parseJsonBodyInTurns(
      wideText,
      { maxDepth: 64, maxContainers: Infinity },
      { now: () => clock++, turnMs: 10, onTurn: () => turns++ },
    )
    clearInterval(ticking)
    expect(value).toStrictEqual(JSON.parse(wideText))
    // 97 checkpoints: the clock reads 1 more at each, so a turn comes every 10 checkpoints.
    expect(turns).toBe(9)
    // Other callbacks ran while it parsed.
    expect(immediates).toBeGreaterThanOrEqual(turns)
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

describe('parseJsonBodyInTurns: small bodies by JSON.parse, checked against the same limits', () => {
  const limits = { maxDepth: 4, maxKeys: 3, maxItems: 3, maxContainers: 6 }
  const cases = [
    '{"a":1,"b":[1,2,3],"c":{"d":null}}',
    '{"a":1,"b":2,"c":3,"d":4}',
    '[1,2,3,4]',
    '[[[[1]]]]',
    '[[[[[1]]]]]',
    '[[],[],[],{},{}]',
    '[[],[],[],[],{},{}]',
    '{"__proto__":{"x":1}}',
    '{"constructor":{"prototype":{"x":1}}}',
    '{"constructor":{"name":"x"}}',
    '{"a":"\\u0000 ok"}',
    '{"a":1,}',
    '',
    '\ufeff{"a":1}',
  ]

  it('agrees with the sliced parser on every case: the same value, or the same error', async () => {
    for (const text of cases) {
      let expected: unknown
      try {
        expected = { value: parseJsonBody(text, limits.maxDepth, limits) }
      } catch (err) {
        expected = { error: (err as GatewayError).code, param: (err as GatewayError).param }
      }
      let got: unknown
      try {
        got = { value: await parseJsonBodyInTurns(text, limits) }
      } catch (err) {
        got = { error: (err as GatewayError).code, param: (err as GatewayError).param }
      }
      expect(got, text).toEqual(expected)
    }
  })

  it('withinLimits passes exactly the parsed values the sliced parser accepts', () => {
    for (const text of cases) {
      let native: unknown
      try {
        native = JSON.parse(text)
      } catch {
        continue
      }
      let accepted = true
      try {
        parseJsonBody(text, limits.maxDepth, limits)
      } catch {
        accepted = false
      }
      expect(withinLimits(native, limits), text).toBe(accepted)
    }
  })
})

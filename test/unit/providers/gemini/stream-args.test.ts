import { describe, expect, it } from 'vitest'
import { createArgsAssembler, parseJsonPath } from '../../../../src/providers/gemini/stream-args.ts'

describe('streamed function-call arguments (partialArgs)', () => {
  it('parses the JSON paths Vertex sends, dotted and bracketed', () => {
    expect(parseJsonPath('$.recipe.ingredients[0].name')).toEqual(['recipe', 'ingredients', 0, 'name'])
    expect(parseJsonPath('$[\'a b\'][2]["c\\"d"]')).toEqual(['a b', 2, 'c"d'])
    expect(parseJsonPath('$')).toBeUndefined()
    expect(parseJsonPath('recipe.name')).toBeUndefined()
    expect(parseJsonPath('$.a[x]')).toBeUndefined()
  })

  it('joins the pieces of a string only while the previous piece at that path continues', () => {
    const a = createArgsAssembler()
    expect(
      a.apply([
        { jsonPath: '$.city', stringValue: 'San ', willContinue: true },
        { jsonPath: '$.city', stringValue: 'Francisco', willContinue: true },
        { jsonPath: '$.city', stringValue: '' },
        { jsonPath: '$.days', numberValue: 3 },
        { jsonPath: '$.tags[0]', stringValue: 'fog' },
        { jsonPath: '$.tags[1]', boolValue: false },
        { jsonPath: '$.note', nullValue: 'NULL_VALUE' },
        // Not continued: a new value at a path replaces the old one.
        { jsonPath: '$.days', numberValue: 4 },
      ]),
    ).toBeUndefined()
    expect(JSON.stringify(a.value)).toBe('{"city":"San Francisco","days":4,"tags":["fog",false],"note":null}')
  })

  it('refuses what cannot be assembled: a gap in an array, a path through a value, a bad path', () => {
    expect(createArgsAssembler().apply([{ jsonPath: '$.xs[1000000000]', numberValue: 1 }])).toMatch(
      /skips array elements/,
    )
    const through = createArgsAssembler()
    expect(
      through.apply([
        { jsonPath: '$.a', numberValue: 1 },
        { jsonPath: '$.a.b', numberValue: 2 },
      ]),
    ).toMatch(/not an object or array/)
    expect(
      createArgsAssembler().apply([
        { jsonPath: '$.a', numberValue: 1 },
        { jsonPath: '$.a[0]', numberValue: 1 },
      ]),
    ).toMatch(/not an object or array/)
    expect(createArgsAssembler().apply([{ jsonPath: 'a', numberValue: 1 }])).toMatch(/not a JSON path/)
  })

  it('keeps a "__proto__" key a plain property', () => {
    const a = createArgsAssembler()
    a.apply([{ jsonPath: "$['__proto__'].polluted", boolValue: true }])
    expect(({} as { polluted?: boolean }).polluted).toBeUndefined()
    expect(JSON.stringify(a.value)).toBe('{"__proto__":{"polluted":true}}')
  })
})

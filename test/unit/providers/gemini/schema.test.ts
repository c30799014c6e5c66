import { describe, expect, it } from 'vitest'
import { toGeminiSchema } from '../../../../src/providers/gemini/schema.ts'

describe('toGeminiSchema', () => {
  it('keeps the supported keywords and drops the rest', () => {
    expect(
      toGeminiSchema({
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        $id: 'x',
        title: 'Event',
        type: 'object',
        additionalProperties: false,
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 80, pattern: '^[A-Z]', examples: ['A'] },
          when: { type: 'string', format: 'date-time' },
          site: { type: 'string', format: 'uri' },
          count: { type: 'integer', minimum: 0, maximum: 10, format: 'int32', exclusiveMaximum: 11 },
          ratio: { type: 'number', format: 'double', default: 0.5 },
          tags: { type: 'array', items: { type: 'string' }, minItems: 1, maxItems: 5, uniqueItems: true },
          ok: { type: 'boolean', description: 'flag' },
        },
        required: ['name', 'missing'],
      }),
    ).toEqual({
      title: 'Event',
      type: 'OBJECT',
      properties: {
        name: { type: 'STRING', minLength: 1, maxLength: 80, pattern: '^[A-Z]' },
        when: { type: 'STRING', format: 'date-time' },
        site: { type: 'STRING' },
        count: { type: 'INTEGER', minimum: 0, maximum: 10, format: 'int32' },
        ratio: { type: 'NUMBER', format: 'double', default: 0.5 },
        tags: { type: 'ARRAY', items: { type: 'STRING' }, minItems: 1, maxItems: 5 },
        ok: { type: 'BOOLEAN', description: 'flag' },
      },
      required: ['name'],
    })
  })

  it('inlines $ref to $defs and definitions, merging sibling keywords', () => {
    expect(
      toGeminiSchema({
        type: 'object',
        properties: {
          home: { $ref: '#/$defs/Address', description: 'where they live' },
          work: { allOf: [{ $ref: '#/definitions/Address' }] },
        },
        $defs: { Address: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
        definitions: { Address: { type: 'object', properties: { zip: { type: 'string' } } } },
      }),
    ).toEqual({
      type: 'OBJECT',
      properties: {
        home: {
          type: 'OBJECT',
          description: 'where they live',
          properties: { city: { type: 'STRING' } },
          required: ['city'],
        },
        work: { type: 'OBJECT', properties: { zip: { type: 'STRING' } } },
      },
    })
  })

  it('ends a recursive $ref in a plain OBJECT instead of looping', () => {
    const s = toGeminiSchema({
      $ref: '#/$defs/Node',
      $defs: { Node: { type: 'object', properties: { child: { $ref: '#/$defs/Node' } } } },
    })
    let depth = 0
    let node: unknown = s
    while ((node as { properties?: { child?: unknown } }).properties?.child) {
      node = (node as { properties: { child: unknown } }).properties.child
      depth++
    }
    expect(depth).toBeGreaterThan(3)
    expect(node).toEqual({ type: 'OBJECT' })
  })

  it('turns null unions into nullable and other unions into anyOf', () => {
    expect(toGeminiSchema({ type: ['integer', 'null'] })).toEqual({ type: 'INTEGER', nullable: true })
    expect(toGeminiSchema({ anyOf: [{ type: 'string' }, { type: 'null' }], description: 'd' })).toEqual({
      type: 'STRING',
      description: 'd',
      nullable: true,
    })
    expect(toGeminiSchema({ oneOf: [{ type: 'string' }, { type: 'number' }] })).toEqual({
      anyOf: [{ type: 'STRING' }, { type: 'NUMBER' }],
    })
    expect(toGeminiSchema({ type: ['string', 'number'] })).toEqual({
      anyOf: [{ type: 'STRING' }, { type: 'NUMBER' }],
    })
  })

  it('keeps string enums, turns const into a one-value enum, drops numeric enums', () => {
    expect(toGeminiSchema({ type: 'string', enum: ['a', 'b'] })).toEqual({
      type: 'STRING',
      enum: ['a', 'b'],
      format: 'enum',
    })
    expect(toGeminiSchema({ enum: ['x'] })).toEqual({ type: 'STRING', enum: ['x'], format: 'enum' })
    expect(toGeminiSchema({ const: 'fixed' })).toEqual({ type: 'STRING', enum: ['fixed'], format: 'enum' })
    expect(toGeminiSchema({ type: 'integer', enum: [1, 2] })).toEqual({ type: 'INTEGER' })
  })

  it('treats a schema with properties but no type as an object', () => {
    expect(toGeminiSchema({ properties: { a: { type: 'string' } } })).toEqual({
      type: 'OBJECT',
      properties: { a: { type: 'STRING' } },
    })
    expect(toGeminiSchema(undefined)).toEqual({})
  })
})

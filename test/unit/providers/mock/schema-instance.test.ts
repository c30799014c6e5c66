import { Ajv2020 } from 'ajv/dist/2020.js'
import addFormats from 'ajv-formats'
import { describe, expect, it } from 'vitest'
import { sampleFromSchema } from '../../../../src/providers/mock/schema-instance.ts'

// Each instance is checked by a real JSON Schema validator, not by its expected shape alone.
const ajv = new Ajv2020({ strict: false, allErrors: true })
addFormats.default(ajv)

function expectValid(schema: object): unknown {
  const instance = sampleFromSchema(schema)
  const validate = ajv.compile(schema)
  expect(validate(instance), `${JSON.stringify(instance)}: ${ajv.errorsText(validate.errors)}`).toBe(true)
  return instance
}

describe('sampleFromSchema gives an instance valid against the schema', () => {
  it.each([
    ['a string', { type: 'string' }, 'mock'],
    ['an integer', { type: 'integer' }, 1],
    ['a boolean', { type: 'boolean' }, true],
    ['null', { type: 'null' }, null],
    ['an enum', { type: 'string', enum: ['celsius', 'fahrenheit'] }, 'celsius'],
    ['a const', { const: 42 }, 42],
    ['a nullable type list', { type: ['null', 'string'] }, 'mock'],
    ['a number above its minimum', { type: 'number', minimum: 10 }, 10],
    ['a number below its maximum', { type: 'number', maximum: -3 }, -3],
    ['an exclusive range', { type: 'integer', exclusiveMinimum: 5, exclusiveMaximum: 7 }, 6],
    ['a multiple', { type: 'integer', minimum: 2, multipleOf: 5 }, 5],
    ['a short string', { type: 'string', maxLength: 2 }, 'mo'],
    ['a long string', { type: 'string', minLength: 8 }, 'mockxxxx'],
    ['a date-time', { type: 'string', format: 'date-time' }, '2025-01-01T00:00:00Z'],
    ['an email', { type: 'string', format: 'email' }, 'mock@example.com'],
    ['a uuid', { type: 'string', format: 'uuid' }, '00000000-0000-4000-8000-000000000000'],
    ['a pattern', { type: 'string', pattern: '^[0-9]+$' }, '0'],
    ['an empty array', { type: 'array', items: { type: 'string' } }, []],
    ['an array with minItems', { type: 'array', items: { type: 'integer' }, minItems: 2 }, [1, 1]],
    [
      'unique items',
      { type: 'array', items: { type: 'string' }, minItems: 3, uniqueItems: true },
      ['mock', 'mock1', 'mock2'],
    ],
    [
      'unique enum items',
      { type: 'array', items: { enum: ['a', 'b'] }, minItems: 2, uniqueItems: true },
      ['a', 'b'],
    ],
    [
      'a tuple',
      { type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], minItems: 2 },
      ['mock', 1],
    ],
  ])('%s', (_, schema, expected) => {
    expect(expectValid(schema)).toEqual(expected)
  })

  it('nested objects: required properties only, with additionalProperties false (strict mode)', () => {
    const schema = {
      type: 'object',
      properties: {
        name: { type: 'string' },
        age: { type: 'integer', minimum: 18 },
        address: {
          type: 'object',
          properties: { city: { type: 'string' }, zip: { type: ['string', 'null'] } },
          required: ['city', 'zip'],
          additionalProperties: false,
        },
        tags: { type: 'array', items: { type: 'string' }, minItems: 1 },
        nickname: { type: 'string' },
      },
      required: ['name', 'age', 'address', 'tags'],
      additionalProperties: false,
    }
    expect(expectValid(schema)).toEqual({
      name: 'mock',
      age: 18,
      address: { city: 'mock', zip: 'mock' },
      tags: ['mock'],
    })
  })

  it('follows $ref into $defs and definitions, and recursive refs end at the required chain', () => {
    expectValid({
      type: 'object',
      properties: { step: { $ref: '#/$defs/step' }, final: { $ref: '#/definitions/answer' } },
      required: ['step', 'final'],
      $defs: {
        step: {
          type: 'object',
          properties: { explanation: { type: 'string' }, next: { $ref: '#/$defs/step' } },
          required: ['explanation'],
        },
      },
      definitions: { answer: { type: 'number', minimum: 3 } },
    })
    const tree = {
      type: 'object',
      properties: { children: { type: 'array', items: { $ref: '#' } }, label: { type: 'string' } },
      required: ['children', 'label'],
    }
    expect(expectValid(tree)).toEqual({ children: [], label: 'mock' })
  })

  it('anyOf with null (a nullable field), oneOf, and allOf merged', () => {
    expect(expectValid({ anyOf: [{ type: 'null' }, { type: 'integer', minimum: 4 }] })).toBe(4)
    expectValid({ oneOf: [{ type: 'string', minLength: 3 }, { type: 'integer' }] })
    expect(
      expectValid({
        allOf: [
          { type: 'object', properties: { a: { type: 'string' } }, required: ['a'] },
          { properties: { b: { type: 'integer', minimum: 7 } }, required: ['b'] },
        ],
      }),
    ).toEqual({ a: 'mock', b: 7 })
  })

  it('a draft-4 boolean exclusiveMinimum (which this validator does not read) is honoured', () => {
    expect(sampleFromSchema({ type: 'integer', minimum: 1, exclusiveMinimum: true })).toBe(2)
    expect(sampleFromSchema({ type: 'number', maximum: 0, exclusiveMaximum: true })).toBeLessThan(0)
  })

  it('minProperties brings in optional properties', () => {
    expect(expectValid({ type: 'object', properties: { x: { type: 'boolean' } }, minProperties: 1 })).toEqual(
      { x: true },
    )
  })

  it('the schema a zod model gives (openai/helpers/zod) for a calendar event', async () => {
    const { z } = await import('zod')
    const schema = z.toJSONSchema(
      z.object({
        name: z.string(),
        date: z.string().describe('ISO date'),
        participants: z.array(z.string()),
        priority: z.enum(['low', 'high']),
        location: z.object({ room: z.string(), floor: z.number().int().min(1) }).nullable(),
      }),
      { target: 'draft-2020-12' },
    )
    expect(expectValid(schema)).toEqual({
      name: 'mock',
      date: 'mock',
      participants: [],
      priority: 'low',
      location: { room: 'mock', floor: 1 },
    })
  })
})

import type { GeminiSchema } from './wire.ts'

// JSON Schema (what OpenAI clients send as tool parameters and response_format schemas) → the
// OpenAPI 3.0 subset Gemini's `Schema` accepts. Gemini rejects unknown keywords, so anything outside
// the subset is dropped: $ref is inlined, type arrays and `null` branches become `nullable`, `const`
// becomes a one-value enum, enums are strings only. https://ai.google.dev/api/caching#Schema

type Json = Record<string, unknown>

const types = new Set(['string', 'number', 'integer', 'boolean', 'array', 'object', 'null'])
/** Formats Gemini accepts per type; others are dropped (a 400 otherwise). */
const formats: Record<string, Set<string>> = {
  STRING: new Set(['enum', 'date-time']),
  NUMBER: new Set(['float', 'double']),
  INTEGER: new Set(['int32', 'int64']),
}
const copied = [
  'title',
  'description',
  'minItems',
  'maxItems',
  'minProperties',
  'maxProperties',
  'minLength',
  'maxLength',
  'pattern',
  'minimum',
  'maximum',
  'propertyOrdering',
  'default',
  'example',
] as const
/** $ref chains deeper than this (a recursive schema) end in a plain OBJECT. */
const MAX_DEPTH = 16

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v)

export function toGeminiSchema(schema: unknown): GeminiSchema {
  const root = isObject(schema) ? schema : {}
  return convert(root, root, 0)
}

function resolveRef(ref: string, root: Json): Json | undefined {
  const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref)
  if (!m) return undefined
  const defs = root[m[1] as string]
  const name = (m[2] as string).replace(/~1/g, '/').replace(/~0/g, '~')
  return isObject(defs) && isObject(defs[name]) ? (defs[name] as Json) : undefined
}

function convert(node: Json, root: Json, depth: number): GeminiSchema {
  if (depth > MAX_DEPTH) return { type: 'OBJECT' }
  if (typeof node.$ref === 'string') {
    const target = resolveRef(node.$ref, root)
    const { $ref: _ref, ...rest } = node
    return target ? convert({ ...target, ...rest }, root, depth + 1) : { type: 'OBJECT' }
  }
  // allOf of one schema (a common wrapper around $ref) is that schema; more are merged shallowly.
  if (Array.isArray(node.allOf)) {
    const { allOf, ...rest } = node
    const members = (allOf as unknown[]).filter(isObject).map((m) => {
      if (typeof m.$ref !== 'string') return m
      const { $ref, ...siblings } = m
      return { ...(resolveRef($ref, root) ?? {}), ...siblings }
    })
    const merged = members.reduce<Json>((acc, m) => {
      const out: Json = { ...acc, ...m }
      if (isObject(acc.properties) || isObject(m.properties)) {
        out.properties = { ...(acc.properties as Json | undefined), ...(m.properties as Json | undefined) }
      }
      if (Array.isArray(acc.required) || Array.isArray(m.required)) {
        out.required = [...((acc.required as unknown[]) ?? []), ...((m.required as unknown[]) ?? [])]
      }
      return out
    }, {})
    return convert({ ...merged, ...rest }, root, depth + 1)
  }

  const out: GeminiSchema = {}
  let nullable = node.nullable === true

  // Union forms: `type: [...]`, anyOf / oneOf.
  const branches = (
    Array.isArray(node.anyOf) ? node.anyOf : Array.isArray(node.oneOf) ? node.oneOf : undefined
  )?.filter(isObject)
  if (branches) {
    const nonNull = branches.filter((b) => b.type !== 'null')
    if (nonNull.length < branches.length) nullable = true
    const { anyOf: _a, oneOf: _o, ...rest } = node
    if (nonNull.length === 1) {
      const single = convert({ ...(nonNull[0] as Json), ...rest }, root, depth + 1)
      if (nullable) single.nullable = true
      return single
    }
    out.anyOf = nonNull.map((b) => convert(b, root, depth + 1))
  }

  let type = node.type
  if (Array.isArray(type)) {
    const named = type.filter((t): t is string => typeof t === 'string' && types.has(t))
    if (named.includes('null')) nullable = true
    const nonNull = named.filter((t) => t !== 'null')
    if (nonNull.length > 1) {
      const { type: _t, ...rest } = node
      out.anyOf = nonNull.map((t) => convert({ ...rest, type: t }, root, depth + 1))
      type = undefined
    } else {
      type = nonNull[0]
    }
  }
  if (node.const !== undefined && node.enum === undefined) {
    if (typeof node.const === 'string') {
      out.enum = [node.const]
      type ??= 'string'
    }
  }
  if (typeof type === 'string' && types.has(type)) out.type = type.toUpperCase() as GeminiSchema['type']
  // An object without a type but with properties is an object.
  if (out.type === undefined && out.anyOf === undefined && isObject(node.properties)) out.type = 'OBJECT'
  if (out.type === undefined && out.anyOf === undefined && Array.isArray(node.enum)) out.type = 'STRING'

  if (Array.isArray(node.enum)) {
    // Gemini enums are strings; a numeric enum cannot be expressed and is dropped.
    if (out.type === 'STRING' && node.enum.every((v) => typeof v === 'string'))
      out.enum = node.enum as string[]
  }
  if (out.enum) out.format = 'enum'
  else if (typeof node.format === 'string' && out.type && formats[out.type]?.has(node.format))
    out.format = node.format

  for (const key of copied) if (node[key] !== undefined) (out as Json)[key] = node[key]

  if (out.type === 'OBJECT' && isObject(node.properties)) {
    const props: Record<string, GeminiSchema> = {}
    for (const [name, p] of Object.entries(node.properties)) {
      props[name] = isObject(p) ? convert(p, root, depth + 1) : {}
    }
    out.properties = props
    if (Array.isArray(node.required)) {
      const required = [
        ...new Set(node.required.filter((r): r is string => typeof r === 'string' && r in props)),
      ]
      if (required.length > 0) out.required = required
    }
  }
  if (out.type === 'ARRAY' && isObject(node.items)) out.items = convert(node.items, root, depth + 1)
  if (nullable) out.nullable = true
  return out
}

/** Gemini rejects an OBJECT with no properties as function parameters: such a function takes none. */
export function isEmptyObjectSchema(s: GeminiSchema): boolean {
  return s.type === 'OBJECT' && (s.properties === undefined || Object.keys(s.properties).length === 0)
}

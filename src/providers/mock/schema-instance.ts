// A minimal JSON value valid against a JSON Schema: the mock's structured output (response_format
// json_schema) and tool-call arguments, so clients' parsers and tool loops can run with no keys.
// Covers what structured-output and tool schemas use: types (and type lists), const, enum, required
// properties of nested objects, arrays with minItems/maxItems/uniqueItems and tuples, numeric and
// length bounds, common string formats, anyOf/oneOf/allOf and local $ref ($defs, definitions, #).
// Not covered: `pattern` beyond a few stock candidates, `not`, conditional schemas (if/then/else).

type Schema = Record<string, unknown>

/** Deepest $ref/nesting followed: a recursive schema's required chain ends there (with null). */
const MAX_DEPTH = 32

const FORMAT_SAMPLES: Record<string, string> = {
  'date-time': '2025-01-01T00:00:00Z',
  date: '2025-01-01',
  time: '00:00:00Z',
  duration: 'P1D',
  email: 'mock@example.com',
  'idn-email': 'mock@example.com',
  hostname: 'example.com',
  'idn-hostname': 'example.com',
  ipv4: '127.0.0.1',
  ipv6: '::1',
  uri: 'https://example.com/',
  'uri-reference': 'https://example.com/',
  iri: 'https://example.com/',
  url: 'https://example.com/',
  uuid: '00000000-0000-4000-8000-000000000000',
}

const isSchema = (value: unknown): value is Schema =>
  typeof value === 'object' && value !== null && !Array.isArray(value)

/**
 * A minimal instance of `schema`: required properties only, the fewest array items allowed, the
 * first enum value or anyOf branch, strings "mock" (or a sample of their format), numbers 1 moved
 * into their bounds. `variant` (≥ 0) makes distinct values for uniqueItems arrays.
 */
export function sampleFromSchema(schema: unknown, variant = 0): unknown {
  return sample(schema, isSchema(schema) ? schema : {}, variant, 0)
}

function sample(schema: unknown, root: Schema, variant: number, depth: number): unknown {
  if (schema === true || schema === undefined) return variant === 0 ? null : variant
  if (!isSchema(schema) || depth > MAX_DEPTH) return null
  if (typeof schema.$ref === 'string') return sample(resolve(schema, root), root, variant, depth + 1)
  const s = schema
  if ('const' in s) return s.const
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[variant % s.enum.length]
  if (Array.isArray(s.allOf) && s.allOf.length > 0) {
    return sample(mergeAll(s, root), root, variant, depth + 1)
  }
  for (const key of ['anyOf', 'oneOf'] as const) {
    const branches = s[key]
    if (Array.isArray(branches) && branches.length > 0) {
      // A non-null branch first: `anyOf: [{type: null}, X]` is how nullable fields are written.
      const branch = branches.find((b) => !(isSchema(b) && b.type === 'null')) ?? branches[0]
      const { [key]: _, ...rest } = s
      return sample(mergeTwo(rest, resolve(branch, root)), root, variant, depth + 1)
    }
  }
  switch (typeOf(s)) {
    case 'string':
      return sampleString(s, variant)
    case 'integer':
      return sampleNumber(s, variant, true)
    case 'number':
      return sampleNumber(s, variant, false)
    case 'boolean':
      return variant % 2 === 0
    case 'array':
      return sampleArray(s, root, variant, depth)
    case 'object':
      return sampleObject(s, root, variant, depth)
    default:
      return null
  }
}

/** The type to produce: the first non-null of a type list, else guessed from the keywords present. */
function typeOf(s: Schema): string | undefined {
  const types = Array.isArray(s.type) ? (s.type as unknown[]) : s.type === undefined ? [] : [s.type]
  const type = types.find((t) => t !== 'null') ?? types[0]
  if (typeof type === 'string') return type
  if (s.properties !== undefined || s.required !== undefined || s.additionalProperties !== undefined) {
    return 'object'
  }
  if (s.items !== undefined || s.prefixItems !== undefined || s.minItems !== undefined) return 'array'
  if (s.minLength !== undefined || s.maxLength !== undefined || s.format !== undefined) return 'string'
  if (s.minimum !== undefined || s.maximum !== undefined || s.multipleOf !== undefined) return 'number'
  return undefined
}

/** `#`, `#/$defs/X`, `#/definitions/X` or any JSON pointer into the root; unknown → {} (anything). */
function resolveRef(ref: string, root: Schema): Schema {
  if (!ref.startsWith('#')) return {}
  let node: unknown = root
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~')
    node = isSchema(node) ? node[key] : undefined
  }
  return isSchema(node) ? node : {}
}

function withoutRef(s: Schema): Schema {
  const { $ref: _, ...rest } = s
  return rest
}

function resolve(schema: unknown, root: Schema): Schema {
  if (!isSchema(schema)) return {}
  return typeof schema.$ref === 'string'
    ? { ...resolveRef(schema.$ref, root), ...withoutRef(schema) }
    : schema
}

/** One schema with the constraints of every allOf member (properties and required merged). */
function mergeAll(s: Schema, root: Schema): Schema {
  const { allOf, ...rest } = s
  return (allOf as unknown[]).reduce<Schema>((acc, member) => mergeTwo(acc, resolve(member, root)), rest)
}

function mergeTwo(a: Schema, b: Schema): Schema {
  const out: Schema = { ...a, ...b }
  if (isSchema(a.properties) || isSchema(b.properties)) {
    out.properties = { ...(a.properties as Schema | undefined), ...(b.properties as Schema | undefined) }
  }
  if (Array.isArray(a.required) || Array.isArray(b.required)) {
    out.required = [...new Set([...((a.required as unknown[]) ?? []), ...((b.required as unknown[]) ?? [])])]
  }
  for (const key of ['minimum', 'minLength', 'minItems', 'exclusiveMinimum'] as const) {
    if (typeof a[key] === 'number' && typeof b[key] === 'number') out[key] = Math.max(a[key], b[key])
  }
  for (const key of ['maximum', 'maxLength', 'maxItems', 'exclusiveMaximum'] as const) {
    if (typeof a[key] === 'number' && typeof b[key] === 'number') out[key] = Math.min(a[key], b[key])
  }
  return out
}

function sampleString(s: Schema, variant: number): string {
  const format = typeof s.format === 'string' ? FORMAT_SAMPLES[s.format] : undefined
  let value = format ?? (variant === 0 ? 'mock' : `mock${variant}`)
  if (typeof s.pattern === 'string') value = matchPattern(s.pattern, value, variant)
  const min = typeof s.minLength === 'number' ? s.minLength : 0
  const max = typeof s.maxLength === 'number' ? s.maxLength : Infinity
  // Length counts code points; the filler is ASCII.
  if (value.length < min) value = value + 'x'.repeat(min - value.length)
  if (value.length > max) value = value.slice(0, max)
  return value
}

/** The sample if it matches, else the first stock candidate that does; the sample when none does. */
function matchPattern(pattern: string, value: string, variant: number): string {
  let re: RegExp
  try {
    re = new RegExp(pattern, 'u')
  } catch {
    return value
  }
  const suffix = variant === 0 ? '' : String(variant)
  const candidates = [value, `a${suffix}`, `A${suffix}`, `0${suffix}`, `${variant}`, `abc${suffix}`, '']
  return candidates.find((c) => re.test(c)) ?? value
}

function sampleNumber(s: Schema, variant: number, integer: boolean): number {
  const num = (k: string) => (typeof s[k] === 'number' ? (s[k] as number) : undefined)
  // Draft 4 writes exclusive bounds as booleans beside minimum/maximum.
  const exMin = num('exclusiveMinimum') ?? (s.exclusiveMinimum === true ? num('minimum') : undefined)
  const exMax = num('exclusiveMaximum') ?? (s.exclusiveMaximum === true ? num('maximum') : undefined)
  const min = s.exclusiveMinimum === true ? undefined : num('minimum')
  const max = s.exclusiveMaximum === true ? undefined : num('maximum')
  const step = num('multipleOf') ?? (integer ? 1 : undefined)
  let low = -Infinity
  if (min !== undefined) low = min
  if (exMin !== undefined) low = Math.max(low, exMin + (step ?? Math.max(Math.abs(exMin) * 1e-9, 1e-9)))
  let high = Infinity
  if (max !== undefined) high = max
  if (exMax !== undefined) high = Math.min(high, exMax - (step ?? Math.max(Math.abs(exMax) * 1e-9, 1e-9)))
  let value = Math.min(Math.max(1 + variant, low), high)
  if (step !== undefined && step > 0) {
    // The first multiple of step at or above the value, unless that passes the upper bound.
    const up = Math.ceil(value / step) * step
    value = up <= high ? up : Math.floor(value / step) * step
  }
  return value
}

function sampleArray(s: Schema, root: Schema, variant: number, depth: number): unknown[] {
  const prefix = Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : []
  const items = Array.isArray(s.items) ? s.additionalItems : s.items
  const min = Math.max(typeof s.minItems === 'number' ? s.minItems : 0, 0)
  const max = typeof s.maxItems === 'number' ? s.maxItems : Infinity
  const out: unknown[] = []
  const count = Math.min(Math.max(min, 0), max)
  for (let i = 0; i < count; i++) {
    const itemSchema = i < prefix.length ? prefix[i] : items
    // uniqueItems: each item its own variant (distinct strings, numbers, enum values).
    out.push(sample(itemSchema, root, s.uniqueItems === true ? variant + i : variant, depth + 1))
  }
  return out
}

function sampleObject(s: Schema, root: Schema, variant: number, depth: number): Record<string, unknown> {
  const properties = isSchema(s.properties) ? s.properties : {}
  const required = Array.isArray(s.required) ? s.required.filter((k) => typeof k === 'string') : []
  const out: Record<string, unknown> = {}
  for (const key of required) {
    out[key] =
      key in properties
        ? sample(properties[key], root, variant, depth + 1)
        : sample(isSchema(s.additionalProperties) ? s.additionalProperties : true, root, variant, depth + 1)
  }
  // minProperties: the optional properties next, in their order.
  const minProperties = typeof s.minProperties === 'number' ? s.minProperties : 0
  for (const key of Object.keys(properties)) {
    if (Object.keys(out).length >= minProperties) break
    if (!(key in out)) out[key] = sample(properties[key], root, variant, depth + 1)
  }
  return out
}

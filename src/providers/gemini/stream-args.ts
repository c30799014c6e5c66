import type { GeminiPartialArg } from './wire.ts'

// Function-call arguments streamed in pieces (Vertex AI with
// `toolConfig.functionCallingConfig.streamFunctionCallArguments`, Gemini 3): the call opens with
// `{name, willContinue: true}`, each following part carries `partialArgs` — one value at a JSON path
// (RFC 9535, e.g. `$.recipe.ingredients[0].name`) — and `{}` without `willContinue` closes it. A
// string may come in several pieces at the same path: a piece with `willContinue: true` is continued
// by the next one at that path (often an empty `stringValue` that only closes it).
// https://cloud.google.com/vertex-ai/generative-ai/docs/reference/rest/v1/Content#PartialArg

type Segment = string | number
type Container = Record<string, unknown> | unknown[]

/** Parses `$.a.b[0]['c d']` into ['a', 'b', 0, 'c d']; undefined for anything else. */
export function parseJsonPath(path: string): Segment[] | undefined {
  if (!path.startsWith('$')) return undefined
  const segments: Segment[] = []
  const re = /\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\["((?:[^"\\]|\\.)*)"\]/y
  let at = 1
  while (at < path.length) {
    re.lastIndex = at
    const m = re.exec(path)
    if (!m) return undefined
    const [, name, index, single, double] = m
    if (name !== undefined) segments.push(name)
    else if (index !== undefined) segments.push(Number(index))
    else segments.push((single ?? double ?? '').replace(/\\(.)/g, '$1'))
    at = re.lastIndex
  }
  return segments.length > 0 ? segments : undefined
}

export interface ArgsAssembler {
  /** Applies one part's partialArgs; a message describing the first one that cannot apply, else undefined. */
  apply(args: GeminiPartialArg[]): string | undefined
  /** The arguments assembled so far. */
  readonly value: Record<string, unknown>
}

export function createArgsAssembler(initial: Record<string, unknown> = {}): ArgsAssembler {
  const value: Record<string, unknown> = structuredClone(initial)
  /** The path whose string value the last piece left open (`willContinue`). */
  let openString: string | undefined

  const applyOne = (arg: GeminiPartialArg): string | undefined => {
    const segments = parseJsonPath(arg.jsonPath)
    if (!segments) return `partialArgs path ${JSON.stringify(arg.jsonPath)} is not a JSON path`
    const continued = openString === arg.jsonPath && typeof arg.stringValue === 'string'
    openString = typeof arg.stringValue === 'string' && arg.willContinue === true ? arg.jsonPath : undefined
    let leaf: unknown
    if (typeof arg.stringValue === 'string') leaf = arg.stringValue
    else if (typeof arg.numberValue === 'number') leaf = arg.numberValue
    else if (typeof arg.boolValue === 'boolean') leaf = arg.boolValue
    else if ('nullValue' in arg) leaf = null
    else return undefined // a piece carrying no value (only closing what was open)

    let container: Container = value
    for (const [i, segment] of segments.entries()) {
      const last = i === segments.length - 1
      const next = segments[i + 1]
      if (Array.isArray(container) !== (typeof segment === 'number')) {
        return `partialArgs path ${arg.jsonPath} does not match the arguments so far`
      }
      // Elements are appended in order: an index past the end would make a sparse (and maybe huge) array.
      if (typeof segment === 'number' && segment > (container as unknown[]).length) {
        return `partialArgs path ${arg.jsonPath} skips array elements`
      }
      const here = container as Record<string | number, unknown>
      const current = Object.hasOwn(here, segment) ? here[segment] : undefined
      if (last) {
        const text = continued && typeof current === 'string' ? current + (leaf as string) : leaf
        // Defined, not assigned: a key such as "__proto__" must stay a plain property.
        Object.defineProperty(here, segment, {
          value: text,
          enumerable: true,
          writable: true,
          configurable: true,
        })
        return undefined
      }
      if (current === undefined || current === null) {
        const created: Container = typeof next === 'number' ? [] : {}
        Object.defineProperty(here, segment, {
          value: created,
          enumerable: true,
          writable: true,
          configurable: true,
        })
        container = created
      } else if (typeof current === 'object') {
        container = current as Container
      } else {
        return `partialArgs path ${arg.jsonPath} goes through a value that is not an object or array`
      }
    }
    return undefined
  }

  return {
    apply(args) {
      for (const arg of args) {
        const problem = applyOne(arg)
        if (problem !== undefined) return problem
      }
      return undefined
    },
    value,
  }
}

import type { z } from 'zod'
import { fromZodError } from '../errors.ts'

/**
 * The one way a route reads its query string: validated by `schema` (coercions and defaults
 * applied), no query at all read as `{}`, and a violation a 400 in the envelope whose `param` names
 * the parameter (`limit`, `purpose`, …). A parameter given twice arrives as an array and fails a
 * string schema the same way.
 */
export function parseQuery<T>(schema: z.ZodType<T>, query: unknown): T {
  const r = schema.safeParse(query ?? {}, { reportInput: true })
  if (!r.success) throw fromZodError(r.error)
  return r.data
}

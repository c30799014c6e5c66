/** JSON with object keys sorted, so equal values compare (and hash) equal as text whatever their key order. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : // Money (bigint picodollars) as its decimal text.
        typeof v === 'bigint'
        ? v.toString()
        : v,
  )
}

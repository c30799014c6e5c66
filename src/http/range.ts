// One byte range of a stored object (RFC 9110 §14): what `Range: bytes=…` asks of an object of `size`
// bytes. Only a single range is served; a list of ranges, another unit or a malformed header is
// ignored (the whole object is sent, as RFC 9110 allows). A range that starts past the end is
// unsatisfiable (416).

export type RangeRequest =
  { kind: 'whole' } | { kind: 'part'; start: number; end: number } | { kind: 'unsatisfiable' }

const SINGLE = /^bytes=(\d*)-(\d*)$/

export function parseRange(header: string | undefined, size: number): RangeRequest {
  if (header === undefined) return { kind: 'whole' }
  const m = SINGLE.exec(header.trim())
  if (!m) return { kind: 'whole' }
  const [, first = '', last = ''] = m
  if (first === '' && last === '') return { kind: 'whole' }
  if (first === '') {
    // The last N bytes.
    const n = Number(last)
    if (n === 0) return { kind: 'unsatisfiable' }
    return size === 0
      ? { kind: 'unsatisfiable' }
      : { kind: 'part', start: Math.max(0, size - n), end: size - 1 }
  }
  const start = Number(first)
  if (start >= size) return { kind: 'unsatisfiable' }
  if (last === '') return { kind: 'part', start, end: size - 1 }
  const end = Number(last)
  if (end < start) return { kind: 'whole' }
  return { kind: 'part', start, end: Math.min(end, size - 1) }
}

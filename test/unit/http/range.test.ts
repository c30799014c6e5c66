import { describe, expect, it } from 'vitest'
import { parseRange } from '../../../src/http/range.ts'

describe('parseRange', () => {
  it('reads one range: from-to, from, the last N bytes', () => {
    expect(parseRange('bytes=0-99', 1000)).toEqual({ kind: 'part', start: 0, end: 99 })
    expect(parseRange('bytes=500-', 1000)).toEqual({ kind: 'part', start: 500, end: 999 })
    expect(parseRange('bytes=-100', 1000)).toEqual({ kind: 'part', start: 900, end: 999 })
    expect(parseRange(' bytes=999-999 ', 1000)).toEqual({ kind: 'part', start: 999, end: 999 })
  })

  it('cuts an end past the object, and a suffix longer than it, to the object', () => {
    expect(parseRange('bytes=10-5000', 1000)).toEqual({ kind: 'part', start: 10, end: 999 })
    expect(parseRange('bytes=-5000', 1000)).toEqual({ kind: 'part', start: 0, end: 999 })
  })

  it('a start at or past the end, an empty suffix, or any range of an empty object is unsatisfiable', () => {
    expect(parseRange('bytes=1000-', 1000)).toEqual({ kind: 'unsatisfiable' })
    expect(parseRange('bytes=1000-2000', 1000)).toEqual({ kind: 'unsatisfiable' })
    expect(parseRange('bytes=-0', 1000)).toEqual({ kind: 'unsatisfiable' })
    expect(parseRange('bytes=0-', 0)).toEqual({ kind: 'unsatisfiable' })
    expect(parseRange('bytes=-5', 0)).toEqual({ kind: 'unsatisfiable' })
  })

  it('ignores what it does not serve: no header, several ranges, another unit, nonsense, end before start', () => {
    for (const header of [
      undefined,
      'bytes=0-1,5-6',
      'items=0-1',
      'bytes=a-b',
      'bytes=-',
      'bytes=5-1',
      'bytes 0-1',
    ]) {
      expect(parseRange(header, 1000)).toEqual({ kind: 'whole' })
    }
  })
})

import { DatabaseSync } from 'node:sqlite'
import { describe, expect, it } from 'vitest'
import { connect } from '../../../src/store/sqlite/commit.ts'

/** A database whose prepared statements' texts are recorded. */
function openSpied(): { db: DatabaseSync; prepared: string[] } {
  const real = new DatabaseSync(':memory:')
  real.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)')
  const prepared: string[] = []
  const db = new Proxy(real, {
    get(target, key) {
      if (key === 'prepare')
        return (text: string) => {
          prepared.push(text)
          return target.prepare(text)
        }
      const value = Reflect.get(target, key, target) as unknown
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value
    },
  })
  return { db, prepared }
}

const rows = (c: ReturnType<typeof connect>): unknown[] =>
  c.all<{ id: number; v: string }>('SELECT id, v FROM t ORDER BY id').map((r) => ({ ...r }))

describe('SQLite group commit', () => {
  it('runs a batch that fails nowhere once, without a savepoint per write', async () => {
    const { db, prepared } = openSpied()
    const c = connect(db)
    let runs = 0
    const insert = (id: number, v: string) =>
      c.tx(() => {
        runs++
        return c.run('INSERT INTO t (id, v) VALUES (?, ?)', id, v)
      })
    expect(await Promise.all([insert(1, 'a'), insert(2, 'b'), insert(3, 'c')])).toEqual([1, 1, 1])
    expect(runs).toBe(3)
    expect(prepared.filter((t) => t.startsWith('SAVEPOINT'))).toEqual([])
    expect(rows(c)).toEqual([
      { id: 1, v: 'a' },
      { id: 2, v: 'b' },
      { id: 3, v: 'c' },
    ])
  })

  it('undoes only the write that failed, after its partial writes, and commits the others once', async () => {
    const { db, prepared } = openSpied()
    const c = connect(db)
    const runs = { a: 0, b: 0, c: 0, d: 0 }
    const results = await Promise.allSettled([
      c.tx(() => {
        runs.a++
        return c.run('INSERT INTO t (id, v) VALUES (1, ?)', 'a')
      }),
      // Writes a row, then fails (a caller's mistake found after a write).
      c.tx(() => {
        runs.b++
        c.run('INSERT INTO t (id, v) VALUES (2, ?)', 'b')
        throw new Error('a mistake found after a write')
      }),
      // Breaks the uniqueness of v after writing a row of its own.
      c.tx(() => {
        runs.c++
        c.run('INSERT INTO t (id, v) VALUES (3, ?)', 'c')
        return c.run('INSERT INTO t (id, v) VALUES (4, ?)', 'a')
      }),
      c.tx(() => {
        runs.d++
        return c.run('INSERT INTO t (id, v) VALUES (5, ?)', 'd')
      }),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'fulfilled'])
    expect((results[1] as PromiseRejectedResult).reason).toEqual(new Error('a mistake found after a write'))
    expect(String((results[2] as PromiseRejectedResult).reason)).toMatch(/UNIQUE/)
    // The first run stopped at the first failure and was rolled back; the second ran each write in a
    // savepoint: what stays is one run's.
    expect(runs).toEqual({ a: 2, b: 2, c: 1, d: 1 })
    expect(prepared.filter((t) => t.startsWith('SAVEPOINT'))).toEqual(['SAVEPOINT op'])
    expect(rows(c)).toEqual([
      { id: 1, v: 'a' },
      { id: 5, v: 'd' },
    ])
  })
})

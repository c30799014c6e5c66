import { DatabaseSync } from 'node:sqlite'
import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { redactUrl } from '../../../src/store/database-url.ts'
import {
  isUnavailable,
  postgresCondition,
  sqliteCondition,
  toStoreError,
} from '../../../src/store/sql-errors.ts'

// The one rule both SQL backends follow: the database failing is 503 store_unavailable; a constraint
// or a statement it refuses is a bug (thrown as it is, 500).

const thrown = (fn: () => unknown): unknown => {
  try {
    fn()
  } catch (err) {
    return err
  }
  throw new Error('did not throw')
}

describe('the SQL error rule', () => {
  it("names node:sqlite's own errors", () => {
    const db = new DatabaseSync(':memory:')
    db.exec('CREATE TABLE t (id TEXT PRIMARY KEY)')
    db.exec("INSERT INTO t VALUES ('a')")
    expect(sqliteCondition(thrown(() => db.exec("INSERT INTO t VALUES ('a')")))).toBe('constraint')
    expect(sqliteCondition(thrown(() => db.exec('SELECT * FROM missing')))).toBe('statement')
    db.close()
    expect(sqliteCondition(thrown(() => db.exec('SELECT 1')))).toBe('shutdown')
    // A caller's own error is not the database's.
    expect(sqliteCondition(new Error('unknown account'))).toBeUndefined()
    // Disk full, busy past the timeout, I/O error (SQLite's primary codes, extended bits aside).
    const sqliteError = (errcode: number) =>
      Object.assign(new Error('x'), { code: 'ERR_SQLITE_ERROR', errcode })
    expect(sqliteCondition(sqliteError(13))).toBe('resources')
    expect(sqliteCondition(sqliteError(5 | (1 << 8)))).toBe('resources')
    expect(sqliteCondition(sqliteError(10 | (3 << 8)))).toBe('io')
    expect(sqliteCondition(sqliteError(19 | (8 << 8)))).toBe('constraint')
  })

  it('names PostgreSQL errors by SQLSTATE; none at all is a connection failure', () => {
    expect(postgresCondition(undefined)).toBe('connection')
    expect(postgresCondition('08006')).toBe('connection')
    expect(postgresCondition('53300')).toBe('resources')
    expect(postgresCondition('57P01')).toBe('shutdown')
    expect(postgresCondition('58030')).toBe('io')
    expect(postgresCondition('23505')).toBe('constraint')
    expect(postgresCondition('42P01')).toBe('statement')
    expect(postgresCondition('40001')).toBe('other')
  })

  it('answers the database failing 503 and everything else as it is', () => {
    for (const c of ['connection', 'resources', 'shutdown', 'io'] as const)
      expect(isUnavailable(c)).toBe(true)
    for (const c of ['constraint', 'statement', 'other'] as const) expect(isUnavailable(c)).toBe(false)
    const cause = new Error('disk full')
    const e = toStoreError(cause, 'resources')
    expect(e).toBeInstanceOf(GatewayError)
    expect(e).toMatchObject({ code: 'store_unavailable', status: 503, cause })
    const bug = new Error('UNIQUE constraint failed')
    expect(toStoreError(bug, 'constraint')).toBe(bug)
  })
})

describe('redactUrl', () => {
  it('hides the password wherever the URL carries it', () => {
    expect(redactUrl('postgres://junction:s3cret@db:5432/j')).toBe('postgres://junction:***@db:5432/j')
    expect(redactUrl('postgres://db/j?user=u&password=s3cret')).not.toContain('s3cret')
    expect(redactUrl('postgres://db/j')).toBe('postgres://db/j')
    expect(redactUrl('not a url with s3cret')).not.toContain('s3cret')
  })
})

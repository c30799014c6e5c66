import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { DatabaseSync } from 'node:sqlite'
import { migrateSqlite } from './migrations.ts'

// Opening the file. Durability: WAL journal with synchronous=NORMAL. A commit is in the WAL file (the
// OS's page cache) when it returns, so it survives the process dying at any point (`kill -9`, a crash,
// OOM); only an OS crash or power loss can lose the last transactions before the next checkpoint's
// fsync (FULL would fsync every commit and cost the hot path a disk flush per request). The database
// stays consistent either way.

/** Opens (creating) the file in WAL mode with the current schema; throws on a newer schema. */
export function openSqliteDatabase(path: string, busyTimeoutMs: number): DatabaseSync {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const db = new DatabaseSync(path, { timeout: busyTimeoutMs })
  try {
    db.exec('PRAGMA journal_mode = WAL')
    db.exec('PRAGMA synchronous = NORMAL')
    db.exec('PRAGMA foreign_keys = ON')
    migrateSqlite(db)
  } catch (err) {
    db.close()
    throw err
  }
  return db
}

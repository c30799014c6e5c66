import { resolve } from 'node:path'
import type { Logger } from 'pino'
import type { DatabaseBackend, DatabaseConfig } from './config.ts'
import { createMemoryStore } from './memory/index.ts'
import { createSqliteStore } from './sqlite/index.ts'
import type { Store } from './types.ts'
import { redactUrl } from './database-url.ts'

// Builds the store the configuration names, and says at start which backend holds the state.

/** Where the state is, as a log line says it (never a password). */
export function describeBackend(backend: DatabaseBackend): { backend: string; location: string } {
  switch (backend.kind) {
    case 'memory':
      return { backend: 'memory', location: 'this process (lost when it exits)' }
    case 'sqlite':
      return { backend: 'sqlite', location: resolve(backend.path) }
    case 'postgres':
      return { backend: 'postgres', location: redactUrl(backend.url) }
  }
}

export async function createStore(database: DatabaseConfig, { log }: { log: Logger }): Promise<Store> {
  const { backend, retentionDays, poolSize } = database
  const where = describeBackend(backend)
  if (backend.kind === 'memory') {
    log.warn(where, 'state store: memory (balances, keys and records are lost at exit)')
    return createMemoryStore({ retentionDays })
  }
  log.info(where, `state store: ${where.backend}`)
  if (backend.kind === 'sqlite') {
    return createSqliteStore(backend.path, {
      retentionDays,
      timeoutMs: database.timeoutMs,
      onCheckpointerError: (err, restartInMs) =>
        log.error(
          { err, restartInMs },
          'the SQLite checkpoint thread failed; checkpoints run inside commits until it is restarted',
        ),
      onCheckpointerRestart: () => log.info('the SQLite checkpoint thread was restarted'),
      onThreadError: (err, restartInMs) =>
        log.error({ err, restartInMs }, 'the SQLite database thread died; starting a new one'),
    })
  }
  // Loaded only when configured: the SQLite default never loads the PostgreSQL client.
  const { createPostgresStore } = await import('./postgres/index.ts')
  return createPostgresStore(backend.url, { log, retentionDays, poolSize })
}

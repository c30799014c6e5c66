import { z } from 'zod'
import { ConfigError } from '../errors.ts'

// The store's slice of the config: which backend and how it is kept (the file's `database` block;
// GATEWAY_DATABASE_URL overrides its url).

/** Where the state lives: `GATEWAY_DATABASE_URL` or the config file's `database.url`. */
export type DatabaseBackend =
  { kind: 'memory' } | { kind: 'sqlite'; path: string } | { kind: 'postgres'; url: string }

export interface DatabaseConfig {
  backend: DatabaseBackend
  /** Generation records older than this are deleted by housekeeping; usage totals stay. Kept forever when unset. */
  retentionDays?: number
  /** PostgreSQL: connections per gateway process. */
  poolSize?: number
  /** SQLite: how long a call waits for the database thread before failing with 503 `store_unavailable`. */
  timeoutMs: number
  /** How long `/readyz` waits for the store to answer before failing (503). */
  readyTimeoutMs: number
}

/** The embedded default: next to the default files directory, whatever files.dir says. */
export const DEFAULT_DATABASE_PATH = './data/junction.db'

/**
 * `memory`; `sqlite:<path>` or a path ending .db/.sqlite/.sqlite3; `postgres://…` / `postgresql://…`.
 * Throws ConfigError for anything else (a typo must not silently pick a backend).
 */
export function parseDatabaseUrl(url: string, from: string): DatabaseBackend {
  if (url === 'memory') return { kind: 'memory' }
  if (/^postgres(ql)?:\/\//.test(url)) return { kind: 'postgres', url }
  if (url.startsWith('sqlite:')) {
    const path = url.slice('sqlite:'.length).replace(/^\/\/(?=\/)/, '')
    if (path === '') throw new ConfigError(`${from}: sqlite: needs a file path (sqlite:./data/junction.db)`)
    return { kind: 'sqlite', path }
  }
  if (/\.(db|sqlite|sqlite3)$/.test(url)) return { kind: 'sqlite', path: url }
  throw new ConfigError(
    `${from}: expected memory, sqlite:<path>, a path ending .db or .sqlite, or postgres://…`,
  )
}

/** The config file's `database` block. */
export const databaseSchema = z
  .object({
    url: z
      .string()
      .min(1)
      .optional()
      .describe(
        '`memory`, `sqlite:<path>` (or a path ending `.db`, `.sqlite`, `.sqlite3`) or `postgres://…`; `sqlite:./data/junction.db` when unset.',
      ),
    retentionDays: z
      .number()
      .positive()
      .max(1_000_000)
      .optional()
      .describe(
        'Generation records (and stored Responses answers) older than this are deleted; kept forever when unset.',
      ),
    poolSize: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .optional()
      .describe('PostgreSQL: connections per gateway process (10 when unset).'),
    timeoutMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .optional()
      .describe(
        'SQLite: how long a call waits for the database thread before failing with 503 `store_unavailable`.',
      ),
    readyTimeoutMs: z
      .number()
      .int()
      .min(100)
      .max(600_000)
      .optional()
      .describe('How long `/readyz` waits for the store to answer before failing (503).'),
  })
  .strict()
  .default({})
  .describe('Where the state lives and how it is kept.')

/** `envUrl`: GATEWAY_DATABASE_URL, which wins over the file's url. */
export function resolveDatabase(
  d: z.infer<typeof databaseSchema>,
  envUrl: string | undefined,
): DatabaseConfig {
  return {
    backend:
      envUrl !== undefined
        ? parseDatabaseUrl(envUrl, 'GATEWAY_DATABASE_URL')
        : d.url !== undefined
          ? parseDatabaseUrl(d.url, 'database.url')
          : { kind: 'sqlite', path: DEFAULT_DATABASE_PATH },
    retentionDays: d.retentionDays,
    poolSize: d.poolSize,
    timeoutMs: d.timeoutMs ?? 5000,
    readyTimeoutMs: d.readyTimeoutMs ?? 2000,
  }
}

// The SQLite schema, as versioned migrations. A database records the versions it has in
// `schema_version`; at start the store applies the missing ones in order, inside one `BEGIN IMMEDIATE`
// transaction, so two processes starting on one file at once cannot both apply one. Never edit a
// migration that has shipped: add the next version.
//
// Money columns are TEXT holding a decimal integer of picodollars: amounts exceed 64 bits (1e9 USD is
// 1e21 picodollars) and SQLite's INTEGER is 64-bit, REAL would round. Sums are computed in JS (bigint)
// inside the transaction that reads them.

export interface Migration {
  version: number
  sql: string
}

export const sqliteMigrations: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE accounts (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        discount_ppm INTEGER NOT NULL,
        model_discounts_ppm TEXT NOT NULL, -- JSON object slug → ppm
        rate_limits TEXT NOT NULL,         -- JSON RateLimits
        credits TEXT NOT NULL,             -- picodollars, decimal
        usage TEXT NOT NULL                -- picodollars, decimal: the sum of its records' costs
      ) STRICT;

      CREATE TABLE api_keys (
        hash TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        account_id TEXT NOT NULL REFERENCES accounts (id),
        prefix TEXT NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at, id);

      CREATE TABLE reservations (
        account_id TEXT NOT NULL,
        id TEXT NOT NULL,
        amount TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (account_id, id)
      ) STRICT;
      CREATE INDEX reservations_by_expiry ON reservations (expires_at);

      -- seq is the settle order: listings page by it, newest first.
      CREATE TABLE generations (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        generation_id TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        cost TEXT NOT NULL,
        record TEXT NOT NULL               -- JSON GenerationRecord, money as decimal strings
      ) STRICT;
      CREATE INDEX generations_by_account ON generations (account_id, seq);
      CREATE INDEX generations_by_created ON generations (created_at);

      CREATE TABLE rate_windows (
        key TEXT PRIMARY KEY,
        window_ms INTEGER NOT NULL,
        start INTEGER NOT NULL,
        current INTEGER NOT NULL,
        previous INTEGER NOT NULL
      ) STRICT;

      -- seq is the commit order: listings follow it.
      CREATE TABLE files (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        content_type TEXT NOT NULL,
        storage_key TEXT NOT NULL
      ) STRICT;
      CREATE INDEX files_by_account ON files (account_id, seq);

      CREATE TABLE file_holds (
        token TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX file_holds_by_account ON file_holds (account_id);

      -- The config file's values last applied to an account (src/deps.ts seedAccounts).
      CREATE TABLE config_applied (
        account_id TEXT PRIMARY KEY,
        snapshot TEXT NOT NULL
      ) STRICT;
    `,
  },
  {
    version: 2,
    // Files by storage key: the orphan sweep (src/files/orphan-sweep.ts) asks which keys have a record.
    sql: `CREATE INDEX files_by_storage_key ON files (storage_key);`,
  },
]

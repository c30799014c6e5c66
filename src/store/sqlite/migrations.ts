import type { DatabaseSync } from 'node:sqlite'

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
  {
    version: 3,
    // Asynchronous predictions (store/types.ts). JSON fields are TEXT JSON; a null `upstream_state` or
    // `error` is SQL NULL. `seq` is the insertion order, the tie-break of "oldest first" (as the
    // memory store's insertion-ordered maps). An idempotency key lives in `task_keys`, not as a UNIQUE
    // column of `tasks`: a key whose task is older than the window moves to the new task while the
    // old task keeps its own copy (what memory does).
    sql: `
      CREATE TABLE tasks (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        account_id TEXT NOT NULL,
        model TEXT NOT NULL,
        family TEXT NOT NULL,
        provider TEXT NOT NULL,
        deployment TEXT NOT NULL,
        upstream_model TEXT NOT NULL,
        input TEXT NOT NULL,
        webhook TEXT,
        origin TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        upstream_state TEXT,
        cancel_upstream INTEGER NOT NULL,
        outputs TEXT NOT NULL,
        error TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        deadline_at INTEGER NOT NULL,
        next_run_at INTEGER NOT NULL,
        runs INTEGER NOT NULL,
        lease_owner TEXT NOT NULL,
        lease_until INTEGER NOT NULL,
        idempotency_key TEXT,
        request_hash TEXT
      ) STRICT;
      -- The runner's poll: only tasks that may need work are in it.
      CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE status = 'processing' OR cancel_upstream = 1;
      CREATE INDEX tasks_by_updated ON tasks (updated_at) WHERE status <> 'processing';

      CREATE TABLE task_keys (
        account_id TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        task_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,      -- the task's createdAt, compared with the window
        PRIMARY KEY (account_id, idempotency_key)
      ) STRICT;
      CREATE INDEX task_keys_by_task ON task_keys (task_id);

      CREATE TABLE task_outputs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        type TEXT NOT NULL,
        content_type TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        storage_key TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX task_outputs_by_expiry ON task_outputs (expires_at, seq);
      CREATE INDEX task_outputs_by_storage_key ON task_outputs (storage_key);

      CREATE TABLE webhook_deliveries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        task_id TEXT NOT NULL,
        account_id TEXT NOT NULL,
        url TEXT NOT NULL,
        body TEXT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL,
        next_attempt_at INTEGER NOT NULL,
        last_error TEXT,
        lease_owner TEXT NOT NULL,
        lease_until INTEGER NOT NULL,
        created_at INTEGER NOT NULL
      ) STRICT;
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, seq) WHERE status = 'pending';
      CREATE INDEX webhook_deliveries_by_task ON webhook_deliveries (task_id, created_at, seq);

      CREATE TABLE secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      ) STRICT;
    `,
  },
  {
    version: 4,
    // When a task's submit started (store/types.ts TaskRecord.submitStartedAt): a submit cut by a
    // crash is not sent again.
    sql: `ALTER TABLE tasks ADD COLUMN submit_started_at INTEGER;`,
  },
  {
    version: 5,
    // How far a charge may go past its hold, and the balance below zero (billing/overage.ts):
    // picodollars, decimal; 0 for the accounts that exist already.
    sql: `ALTER TABLE accounts ADD COLUMN overdraft TEXT NOT NULL DEFAULT '0';`,
  },
  {
    version: 6,
    // Stored Responses API answers (store/types.ts): input and response are TEXT JSON, read whole.
    sql: `
      CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        account_id TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        input TEXT NOT NULL,
        response TEXT NOT NULL
      ) STRICT;
      CREATE INDEX responses_created ON responses (created_at);
    `,
  },
  {
    version: 7,
    // Keys with settings (store/key-usage.ts encodes them as one JSON object), the key a hold and a
    // record were made with, each key's spend counters, and the account's notice settings.
    sql: `
      ALTER TABLE api_keys ADD COLUMN settings TEXT NOT NULL DEFAULT '{}';
      ALTER TABLE reservations ADD COLUMN key_hash TEXT;
      ALTER TABLE generations ADD COLUMN key_hash TEXT;
      CREATE INDEX generations_by_key ON generations (account_id, key_hash, seq) WHERE key_hash IS NOT NULL;
      CREATE TABLE key_usage (
        key_hash TEXT PRIMARY KEY,
        total TEXT NOT NULL,               -- picodollars, decimal, as every money column
        day_start INTEGER NOT NULL,
        day TEXT NOT NULL,
        week_start INTEGER NOT NULL,
        week TEXT NOT NULL,
        month_start INTEGER NOT NULL,
        month TEXT NOT NULL
      ) STRICT;
      ALTER TABLE accounts ADD COLUMN notices TEXT NOT NULL DEFAULT '{}';
    `,
  },
  {
    version: 8,
    // GenerationStore.activity: an account's records of a time range.
    sql: `CREATE INDEX generations_by_account_created ON generations (account_id, created_at);
      CREATE INDEX tasks_by_account ON tasks (account_id, seq);
      CREATE INDEX webhook_deliveries_by_account ON webhook_deliveries (account_id, seq);`,
  },
  {
    version: 9,
    // A task's upstream calls so far (store/tasks.ts TaskRecord.attempts), JSON; NULL: none yet, or a
    // task stored before they were kept.
    sql: `ALTER TABLE tasks ADD COLUMN attempts TEXT;`,
  },
  {
    version: 10,
    // The sum of all an account's holds, open or expired, on its row (`held`), and of all the holds
    // made with a key (`key_held`), kept by triggers on reservations: a new hold reads one row instead
    // of every hold in flight (ledger.ts), and every writer keeps them, an older gateway still running
    // on the same file included. SQLite's integers are 64-bit: a total or amount wider than 18 digits is
    // dropped instead (NULL, or the key's row deleted) and summed again, exactly, at the next hold.
    // NULL (no row for a key) until then; a key has a row from the first time its holds are asked for.
    sql: `
      ALTER TABLE accounts ADD COLUMN held TEXT;
      CREATE TABLE key_held (key_hash TEXT PRIMARY KEY, held TEXT NOT NULL) STRICT;
      CREATE TRIGGER reservations_held_inserted AFTER INSERT ON reservations BEGIN
        UPDATE accounts SET held = CASE WHEN length(held) <= 18 AND length(NEW.amount) <= 18
            THEN CAST(CAST(held AS INTEGER) + CAST(NEW.amount AS INTEGER) AS TEXT) END
          WHERE id = NEW.account_id AND held IS NOT NULL;
        DELETE FROM key_held WHERE key_hash = NEW.key_hash
          AND NOT (length(held) <= 18 AND length(NEW.amount) <= 18);
        UPDATE key_held SET held = CAST(CAST(held AS INTEGER) + CAST(NEW.amount AS INTEGER) AS TEXT)
          WHERE key_hash = NEW.key_hash;
      END;
      CREATE TRIGGER reservations_held_deleted AFTER DELETE ON reservations BEGIN
        UPDATE accounts SET held = CASE WHEN length(held) <= 18 AND length(OLD.amount) <= 18
            THEN CAST(CAST(held AS INTEGER) - CAST(OLD.amount AS INTEGER) AS TEXT) END
          WHERE id = OLD.account_id AND held IS NOT NULL;
        DELETE FROM key_held WHERE key_hash = OLD.key_hash
          AND NOT (length(held) <= 18 AND length(OLD.amount) <= 18);
        UPDATE key_held SET held = CAST(CAST(held AS INTEGER) - CAST(OLD.amount AS INTEGER) AS TEXT)
          WHERE key_hash = OLD.key_hash;
      END;
      CREATE TRIGGER reservations_held_updated AFTER UPDATE OF account_id, amount, key_hash ON reservations
      BEGIN
        UPDATE accounts SET held = CASE WHEN length(held) <= 18 AND length(OLD.amount) <= 18
            THEN CAST(CAST(held AS INTEGER) - CAST(OLD.amount AS INTEGER) AS TEXT) END
          WHERE id = OLD.account_id AND held IS NOT NULL;
        UPDATE accounts SET held = CASE WHEN length(held) <= 18 AND length(NEW.amount) <= 18
            THEN CAST(CAST(held AS INTEGER) + CAST(NEW.amount AS INTEGER) AS TEXT) END
          WHERE id = NEW.account_id AND held IS NOT NULL;
        DELETE FROM key_held WHERE key_hash = OLD.key_hash
          AND NOT (length(held) <= 18 AND length(OLD.amount) <= 18);
        UPDATE key_held SET held = CAST(CAST(held AS INTEGER) - CAST(OLD.amount AS INTEGER) AS TEXT)
          WHERE key_hash = OLD.key_hash;
        DELETE FROM key_held WHERE key_hash = NEW.key_hash
          AND NOT (length(held) <= 18 AND length(NEW.amount) <= 18);
        UPDATE key_held SET held = CAST(CAST(held AS INTEGER) + CAST(NEW.amount AS INTEGER) AS TEXT)
          WHERE key_hash = NEW.key_hash;
      END;
    `,
  },
]

/** Applies the migrations `db` lacks, in one write transaction. */
export function migrateSqlite(db: DatabaseSync, migrations: readonly Migration[] = sqliteMigrations): void {
  db.exec('BEGIN IMMEDIATE')
  try {
    db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL) STRICT')
    const row = db.prepare('SELECT max(version) AS v FROM schema_version').get() as { v: number | null }
    const current = row.v ?? 0
    const latest = migrations.at(-1)?.version ?? 0
    if (current > latest) {
      throw new Error(
        `the database has schema version ${current}, newer than this gateway knows (${latest}): run a newer gateway`,
      )
    }
    for (const m of migrations) {
      if (m.version <= current) continue
      db.exec(m.sql)
      db.prepare('INSERT INTO schema_version (version) VALUES (?)').run(m.version)
    }
    db.exec('COMMIT')
  } catch (err) {
    if (db.isTransaction) db.exec('ROLLBACK')
    throw err
  }
}

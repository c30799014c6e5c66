import type { Logger } from '../../logger.ts'
import type { Transaction } from './pool.ts'

// The PostgreSQL schema as versioned migrations, applied in order at start (`migrate`, at the end of
// this file; the comments inside older entries name postgres.ts, which is now this folder). A migration
// is never edited once released: a change is a new entry at the end.
//
// Money columns are NUMERIC(40,0) picodollars (1e9 USD is 1e21, beyond BIGINT); times are BIGINT Unix
// ms given by the caller, never the database's clock.

export interface Migration {
  version: number
  name: string
  sql: string
}

export const migrations: readonly Migration[] = [
  {
    version: 1,
    name: 'accounts, ledger, generations, files, rate limits',
    sql: `
      CREATE TABLE accounts (
        id text PRIMARY KEY,
        name text NOT NULL,
        created_at bigint NOT NULL,
        discount_ppm integer NOT NULL,
        model_discounts_ppm jsonb NOT NULL,
        rate_limits jsonb NOT NULL
      );
      CREATE INDEX accounts_created ON accounts (created_at, id);

      CREATE TABLE api_keys (
        hash text PRIMARY KEY,
        id text NOT NULL,
        account_id text NOT NULL REFERENCES accounts (id),
        prefix text NOT NULL,
        created_at bigint NOT NULL
      );
      CREATE INDEX api_keys_account ON api_keys (account_id, created_at, id);

      CREATE TABLE ledger (
        account_id text PRIMARY KEY REFERENCES accounts (id),
        credits numeric(40, 0) NOT NULL,
        usage numeric(40, 0) NOT NULL
      );

      CREATE TABLE reservations (
        account_id text NOT NULL REFERENCES accounts (id),
        id text NOT NULL,
        amount numeric(40, 0) NOT NULL,
        expires_at bigint NOT NULL,
        PRIMARY KEY (account_id, id)
      );
      CREATE INDEX reservations_expiry ON reservations (expires_at);

      CREATE TABLE generations (
        seq bigserial PRIMARY KEY,
        generation_id text NOT NULL UNIQUE,
        account_id text NOT NULL REFERENCES accounts (id),
        api text NOT NULL,
        model text NOT NULL,
        provider text NOT NULL,
        created_at bigint NOT NULL,
        generation_time_ms bigint NOT NULL,
        latency_ms bigint NOT NULL,
        streamed boolean NOT NULL,
        finish_reason text,
        cancelled boolean NOT NULL,
        cost_source text NOT NULL,
        usage jsonb NOT NULL,
        upstream_cost numeric(40, 0) NOT NULL,
        discount_ppm integer NOT NULL,
        discount numeric(40, 0) NOT NULL,
        cost numeric(40, 0) NOT NULL
      );
      CREATE INDEX generations_account ON generations (account_id, seq);

      -- Per-account file totals; its row is also the lock that serialises the account's quota checks.
      CREATE TABLE file_accounts (
        account_id text PRIMARY KEY,
        files integer NOT NULL DEFAULT 0,
        bytes bigint NOT NULL DEFAULT 0
      );

      CREATE TABLE files (
        seq bigserial PRIMARY KEY,
        account_id text NOT NULL,
        id text NOT NULL,
        bytes bigint NOT NULL,
        created_at bigint NOT NULL,
        filename text NOT NULL,
        purpose text NOT NULL,
        content_type text NOT NULL,
        storage_key text NOT NULL,
        UNIQUE (account_id, id)
      );
      CREATE INDEX files_account ON files (account_id, seq);

      -- Uploads in progress, each holding one file slot until committed, released or expired.
      CREATE TABLE file_holds (
        token text PRIMARY KEY,
        account_id text NOT NULL,
        expires_at bigint NOT NULL
      );
      CREATE INDEX file_holds_account ON file_holds (account_id);
      CREATE INDEX file_holds_expiry ON file_holds (expires_at);

      CREATE TABLE rate_windows (
        key text PRIMARY KEY,
        window_ms bigint NOT NULL,
        start bigint NOT NULL,
        current bigint NOT NULL,
        previous bigint NOT NULL
      );
    `,
  },
  {
    version: 2,
    name: 'reserve in one round trip',
    sql: `
      -- Holds credits: locks the account's ledger row, then sums the open holds and inserts the new
      -- one. It must be a VOLATILE function: under READ COMMITTED each of its queries takes a new
      -- snapshot, so the sum, read after the lock is granted, sees every hold committed before it
      -- (one plain statement would read it from a snapshot taken before waiting for the lock).
      -- NULL: unknown account, or nothing available.
      CREATE FUNCTION junction_reserve(
        p_account text, p_id text, p_upper numeric, p_expires_at bigint, p_now bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        avail numeric;
        held numeric;
      BEGIN
        SELECT credits - usage INTO avail FROM ledger WHERE account_id = p_account FOR NO KEY UPDATE;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        SELECT avail - coalesce(sum(amount), 0) INTO avail FROM reservations
          WHERE account_id = p_account AND expires_at > p_now;
        IF avail <= 0 THEN
          RETURN NULL;
        END IF;
        held := least(p_upper, avail);
        INSERT INTO reservations (account_id, id, amount, expires_at)
          VALUES (p_account, p_id, held, p_expires_at)
          ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount, expires_at = excluded.expires_at;
        RETURN held;
      END
      $$;
    `,
  },
  {
    version: 3,
    name: 'rate-limit consume in one round trip',
    sql: `
      -- All-or-nothing sliding-window counting over several checks (the logic of memory.ts), as one
      -- statement: the windows are inserted if missing and locked in key order (no deadlocks), rolled
      -- over to the window of p_now, judged, and counted only if every check fits. One row per check,
      -- in order: whether it fits and what was used before it. Counters are not money: the commit
      -- does not wait for the disk (a database crash may forget the last moments of counting).
      CREATE FUNCTION junction_consume(
        p_keys text[], p_amounts bigint[], p_limits bigint[], p_window bigint, p_now bigint
      ) RETURNS TABLE (fits boolean, used bigint) LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_start bigint := p_now - p_now % p_window;
        v_weight float8 := 1 - (p_now - v_start)::float8 / p_window::float8;
        v_fits boolean[] := '{}';
        v_used bigint[] := '{}';
        v_all boolean := true;
        v_prev bigint;
        v_cur bigint;
        v_before bigint;
        i integer;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
          SELECT k, p_window, v_start, 0, 0 FROM (SELECT DISTINCT unnest(p_keys) AS k) u ORDER BY k
          ON CONFLICT (key) DO UPDATE SET key = r.key;
        UPDATE rate_windows SET
            previous = CASE WHEN v_start - start = p_window THEN current ELSE 0 END,
            current = 0, start = v_start, window_ms = p_window
          WHERE key = ANY (p_keys) AND start <> v_start;
        FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
          SELECT previous, current INTO v_prev, v_cur FROM rate_windows WHERE key = p_keys[i];
          -- What earlier checks of this call would add, should one key appear twice.
          SELECT coalesce(sum(p_amounts[j]), 0) INTO v_before
            FROM generate_series(1, i - 1) AS j WHERE p_keys[j] = p_keys[i];
          v_used := v_used || (ceil(v_prev::float8 * v_weight)::bigint + v_cur + v_before);
          v_fits := v_fits || (v_used[i] + p_amounts[i] <= p_limits[i]);
          v_all := v_all AND v_fits[i];
        END LOOP;
        IF v_all THEN
          UPDATE rate_windows r SET current = r.current + a.amount
            FROM (SELECT k, sum(n) AS amount FROM unnest(p_keys, p_amounts) AS c(k, n) GROUP BY k) a
            WHERE r.key = a.k;
        END IF;
        RETURN QUERY SELECT f, u FROM unnest(v_fits, v_used) AS t(f, u);
      END
      $$;
    `,
  },
  {
    version: 4,
    // What the config file said about each account at the last start (deps.ts seedAccounts), and an
    // index for the retention sweep.
    name: 'applied config snapshots; generations by time',
    sql: `
      CREATE TABLE config_applied (
        account_id text PRIMARY KEY,
        snapshot text NOT NULL
      );
      CREATE INDEX generations_created ON generations (created_at);
    `,
  },
  {
    version: 5,
    // The upstream calls made for each generation (routing: retries and fallbacks), and the lookup
    // of the orphan file sweep (src/files/orphan-sweep.ts).
    name: 'generation attempts; files by storage key',
    sql: `
      ALTER TABLE generations ADD COLUMN attempts jsonb;
      CREATE INDEX files_by_storage_key ON files (storage_key);
    `,
  },
  {
    version: 6,
    // Asynchronous predictions (store/tasks.ts). JSON fields are \`json\`, not \`jsonb\`: a client's input
    // is stored as sent (jsonb refuses a \u0000 in a string, and would reorder keys); a null upstream
    // state or error is SQL NULL. \`seq\` is the insertion order, the tie-break of "oldest first". An
    // idempotency key lives in \`task_keys\` rather than as a UNIQUE column of tasks: a key whose task
    // is older than the window moves to the new task while the old task keeps its own copy.
    name: 'prediction tasks, outputs, webhook deliveries, secrets',
    sql: `
      CREATE TABLE tasks (
        seq bigserial PRIMARY KEY,
        id text NOT NULL UNIQUE,
        account_id text NOT NULL,
        model text NOT NULL,
        family text NOT NULL,
        provider text NOT NULL,
        deployment text NOT NULL,
        upstream_model text NOT NULL,
        input json NOT NULL,
        webhook text,
        origin text NOT NULL DEFAULT '',
        status text NOT NULL,
        upstream_state json,
        cancel_upstream boolean NOT NULL,
        outputs json NOT NULL,
        error json,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        deadline_at bigint NOT NULL,
        next_run_at bigint NOT NULL,
        runs integer NOT NULL,
        lease_owner text NOT NULL,
        lease_until bigint NOT NULL,
        idempotency_key text,
        request_hash text
      );
      -- The runner's poll: only tasks that may need work are in it.
      CREATE INDEX tasks_due ON tasks (next_run_at, seq) WHERE status = 'processing' OR cancel_upstream;
      CREATE INDEX tasks_by_updated ON tasks (updated_at) WHERE status <> 'processing';

      CREATE TABLE task_keys (
        account_id text NOT NULL,
        idempotency_key text NOT NULL,
        task_id text NOT NULL,
        created_at bigint NOT NULL,
        PRIMARY KEY (account_id, idempotency_key)
      );
      CREATE INDEX task_keys_by_task ON task_keys (task_id);

      CREATE TABLE task_outputs (
        seq bigserial PRIMARY KEY,
        id text NOT NULL UNIQUE,
        task_id text NOT NULL,
        account_id text NOT NULL,
        type text NOT NULL,
        content_type text NOT NULL,
        bytes bigint NOT NULL,
        storage_key text NOT NULL,
        created_at bigint NOT NULL,
        expires_at bigint NOT NULL
      );
      CREATE INDEX task_outputs_by_expiry ON task_outputs (expires_at, seq);
      CREATE INDEX task_outputs_by_storage_key ON task_outputs (storage_key);

      CREATE TABLE webhook_deliveries (
        seq bigserial PRIMARY KEY,
        id text NOT NULL UNIQUE,
        task_id text NOT NULL,
        account_id text NOT NULL,
        url text NOT NULL,
        body text NOT NULL,
        status text NOT NULL,
        attempts integer NOT NULL,
        next_attempt_at bigint NOT NULL,
        last_error text,
        lease_owner text NOT NULL,
        lease_until bigint NOT NULL,
        created_at bigint NOT NULL
      );
      CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, seq) WHERE status = 'pending';
      CREATE INDEX webhook_deliveries_by_task ON webhook_deliveries (task_id, created_at, seq);

      CREATE TABLE secrets (
        name text PRIMARY KEY,
        value text NOT NULL
      );
    `,
  },
  {
    version: 7,
    // When a task's submit started (store/tasks.ts TaskRecord.submitStartedAt): a submit cut by a
    // crash is not sent again.
    name: 'task submit start',
    sql: `ALTER TABLE tasks ADD COLUMN submit_started_at bigint;`,
  },
  {
    version: 8,
    // A charge is capped at its hold plus the account's overdraft, and the balance less the other
    // holds never goes below −overdraft (billing/overage.ts); what the upstream priced beyond that is
    // kept on the generation as unbilled (NULL: nothing was).
    name: 'overdraft, charge ceiling, unbilled overage',
    sql: `
      ALTER TABLE accounts ADD COLUMN overdraft numeric(40,0) NOT NULL DEFAULT 0;
      ALTER TABLE generations ADD COLUMN unbilled_usd numeric(40,0), ADD COLUMN unbilled_tokens bigint;
      -- The most a generation costing p_cost may be charged (chargeCeiling in billing/overage.ts).
      -- p_held NULL: the hold's stored amount, if it is still open. A cost within its open hold is
      -- charged as it is, with one lookup. Otherwise it locks the account's ledger row first, as
      -- junction_reserve does, and being VOLATILE reads the holds after the lock. NULL: unknown account.
      CREATE FUNCTION junction_charge_ceiling(
        p_account text, p_id text, p_held numeric, p_now bigint, p_cost numeric
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_free numeric;
        v_overdraft numeric;
        v_held numeric;
        v_ceiling numeric;
      BEGIN
        SELECT amount INTO v_held FROM reservations
          WHERE account_id = p_account AND id = p_id AND expires_at > p_now;
        IF FOUND AND p_cost <= coalesce(p_held, v_held) THEN
          RETURN p_cost;
        END IF;
        v_held := coalesce(p_held, v_held);
        SELECT l.credits - l.usage, greatest(a.overdraft, 0) INTO v_free, v_overdraft
          FROM ledger l JOIN accounts a ON a.id = l.account_id
          WHERE l.account_id = p_account FOR NO KEY UPDATE OF l;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        SELECT v_free - coalesce(sum(amount), 0) INTO v_free FROM reservations
          WHERE account_id = p_account AND id <> p_id AND expires_at > p_now;
        v_ceiling := v_free + v_overdraft;
        IF v_held IS NOT NULL THEN
          v_ceiling := least(v_ceiling, v_held + v_overdraft);
        END IF;
        RETURN greatest(v_ceiling, 0);
      END
      $$;
    `,
  },
  {
    version: 9,
    // Stored Responses API answers (store/responses.ts): json, not jsonb, as for tasks (kept as sent).
    name: 'stored responses',
    sql: `
      CREATE TABLE responses (
        id text PRIMARY KEY,
        account_id text NOT NULL,
        created_at bigint NOT NULL,
        input json NOT NULL,
        response json NOT NULL
      );
      CREATE INDEX responses_created ON responses (created_at);
    `,
  },
  {
    version: 10,
    // Group commit (postgres.ts, createBatches): the reserves, settles and rate-limit checks that one
    // gateway process has pending at once go to the database as one call per kind, so one round trip and
    // one commit serve the whole batch. Each function first locks every row the batch will write in one
    // order (ledger rows by account id; rate windows by key), so batches of two processes never deadlock
    // and an account's row is locked once per batch, then applies the items one after another with the
    // single-item logic (junction_reserve, junction_charge_ceiling, junction_consume): a batch decides
    // exactly as the same calls made one at a time in that order.
    name: 'group commit: batched reserve, settle and rate-limit consume',
    sql: `
      -- The holds of a batch, as junction_reserve would take them one after another, but reading each
      -- account's open holds once per distinct now of the batch (not once per call: a hot account has
      -- as many holds as requests in flight) and inserting them in one statement. A batch where that
      -- would not be exact (an id held already or twice in it, or a hold of it expiring before a later
      -- call's now) takes the holds one at a time with junction_reserve instead.
      CREATE FUNCTION junction_reserve_many(
        p_accounts text[], p_ids text[], p_uppers numeric[], p_expires bigint[], p_nows bigint[]
      ) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        n integer := coalesce(array_length(p_accounts, 1), 0);
        v_out numeric[] := '{}';
        v_base numeric[];
        v_accts text[] := '{}';
        v_taken numeric[] := '{}';
        v_free numeric;
        v_held numeric;
        k integer;
        i integer;
      BEGIN
        PERFORM 1 FROM ledger WHERE account_id = ANY (p_accounts) ORDER BY account_id FOR NO KEY UPDATE;
        IF (SELECT count(DISTINCT (a, d)) FROM unnest(p_accounts, p_ids) AS t(a, d)) < n
          OR (SELECT min(e) FROM unnest(p_expires) AS e) <= (SELECT max(t) FROM unnest(p_nows) AS t)
          OR EXISTS (SELECT 1 FROM reservations r JOIN unnest(p_accounts, p_ids) AS t(a, d)
                     ON r.account_id = t.a AND r.id = t.d) THEN
          FOR i IN 1 .. n LOOP
            v_out := array_append(v_out,
              junction_reserve(p_accounts[i], p_ids[i], p_uppers[i], p_expires[i], p_nows[i]));
          END LOOP;
          RETURN v_out;
        END IF;
        -- What each call would find free before the batch's own holds (NULL: unknown account).
        WITH pairs AS (SELECT DISTINCT a, t FROM unnest(p_accounts, p_nows) AS u(a, t)),
          free AS (
            SELECT p.a, p.t, l.credits - l.usage - coalesce((SELECT sum(r.amount) FROM reservations r
              WHERE r.account_id = p.a AND r.expires_at > p.t), 0) AS f
            FROM pairs p JOIN ledger l ON l.account_id = p.a)
        SELECT array_agg(free.f ORDER BY u.i) INTO v_base
          FROM unnest(p_accounts, p_nows) WITH ORDINALITY AS u(a, t, i)
          LEFT JOIN free ON free.a = u.a AND free.t = u.t;
        FOR i IN 1 .. n LOOP
          v_held := NULL;
          IF v_base[i] IS NOT NULL THEN
            k := array_position(v_accts, p_accounts[i]);
            IF k IS NULL THEN
              v_accts := array_append(v_accts, p_accounts[i]);
              v_taken := array_append(v_taken, 0::numeric);
              k := array_length(v_accts, 1);
            END IF;
            v_free := v_base[i] - v_taken[k];
            IF v_free > 0 THEN
              v_held := least(p_uppers[i], v_free);
              v_taken[k] := v_taken[k] + v_held;
            END IF;
          END IF;
          v_out := array_append(v_out, v_held);
        END LOOP;
        INSERT INTO reservations (account_id, id, amount, expires_at)
          SELECT a, d, h, e FROM unnest(p_accounts, p_ids, v_out, p_expires) AS u(a, d, h, e)
          WHERE h IS NOT NULL;
        RETURN v_out;
      END
      $$;

      -- p: a json array of settles, each {the record's columns, a: account, ref: reservation id, cost,
      -- held, now, tokens}. Returns the charged cost per item, NULL for a generation id already settled
      -- (in an earlier batch or earlier in this one). The charges are added to each account's usage once,
      -- at the end, unless a charge past its hold must read the balance first (then the account's
      -- charges so far are added before junction_charge_ceiling reads it).
      CREATE FUNCTION junction_settle_many(p jsonb) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        e jsonb;
        v_cost numeric;
        v_full numeric;
        v_hold numeric;
        v_charged numeric;
        v_out numeric[] := '{}';
        v_accts text[] := '{}';
        v_pending numeric[] := '{}';
        k integer;
      BEGIN
        PERFORM 1 FROM ledger WHERE account_id IN (SELECT x->>'a' FROM jsonb_array_elements(p) x)
          ORDER BY account_id FOR NO KEY UPDATE;
        FOR e IN SELECT x FROM jsonb_array_elements(p) AS x LOOP
          v_full := (e->>'cost')::numeric;
          k := array_position(v_accts, e->>'a');
          IF k IS NULL THEN
            v_accts := array_append(v_accts, e->>'a');
            v_pending := array_append(v_pending, 0::numeric);
            k := array_length(v_accts, 1);
          END IF;
          SELECT amount INTO v_hold FROM reservations
            WHERE account_id = e->>'a' AND id = e->>'ref' AND expires_at > (e->>'now')::bigint;
          IF FOUND AND v_full <= coalesce((e->>'held')::numeric, v_hold) THEN
            v_cost := v_full;
          ELSE
            IF v_pending[k] <> 0 THEN
              UPDATE ledger SET usage = usage + v_pending[k] WHERE account_id = e->>'a';
              v_pending[k] := 0;
            END IF;
            v_cost := least(v_full, junction_charge_ceiling(e->>'a', e->>'ref', (e->>'held')::numeric,
              (e->>'now')::bigint, v_full));
          END IF;
          v_charged := NULL;
          INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
              generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
              upstream_cost, discount_ppm, discount, cost, attempts, unbilled_usd, unbilled_tokens)
            VALUES (e->>'id', e->>'a', e->>'api', e->>'model', e->>'provider', (e->>'createdAt')::bigint,
              (e->>'generationTimeMs')::bigint, (e->>'latencyMs')::bigint, (e->>'streamed')::boolean,
              e->>'finishReason', (e->>'cancelled')::boolean, e->>'costSource', e->'usage',
              (e->>'upstreamCost')::numeric, (e->>'discountPpm')::integer, (e->>'discount')::numeric,
              v_cost, CASE WHEN jsonb_typeof(e->'attempts') = 'array' THEN e->'attempts' END,
              CASE WHEN v_cost < v_full THEN v_full - v_cost END,
              CASE WHEN v_cost < v_full
                THEN floor(((e->>'tokens')::numeric * (v_full - v_cost) * 2 + v_full) / (2 * v_full)) END)
            ON CONFLICT (generation_id) DO NOTHING RETURNING cost INTO v_charged;
          IF v_charged IS NOT NULL THEN
            DELETE FROM reservations WHERE account_id = e->>'a' AND id = e->>'ref';
            v_pending[k] := v_pending[k] + v_charged;
          END IF;
          v_out := array_append(v_out, v_charged);
        END LOOP;
        UPDATE ledger l SET usage = l.usage + c.amount
          FROM unnest(v_accts, v_pending) AS c(a, amount)
          WHERE l.account_id = c.a AND c.amount <> 0;
        RETURN v_out;
      END
      $$;

      -- Several consume calls: call c has the checks p_first[c] .. p_first[c] + p_count[c] - 1 of the
      -- flat arrays, its own window and now. One row per check, in order, with its call's number.
      CREATE FUNCTION junction_consume_many(
        p_first integer[], p_count integer[], p_windows bigint[], p_nows bigint[],
        p_keys text[], p_amounts bigint[], p_limits bigint[]
      ) RETURNS TABLE (call integer, fits boolean, used bigint) LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        c integer;
        lo integer;
        hi integer;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
          SELECT k, p_windows[1], p_nows[1] - p_nows[1] % p_windows[1], 0, 0
          FROM (SELECT DISTINCT unnest(p_keys) AS k) u ORDER BY k
          ON CONFLICT (key) DO UPDATE SET key = r.key;
        FOR c IN 1 .. coalesce(array_length(p_first, 1), 0) LOOP
          lo := p_first[c];
          hi := p_first[c] + p_count[c] - 1;
          RETURN QUERY SELECT c, t.fits, t.used
            FROM junction_consume(p_keys[lo:hi], p_amounts[lo:hi], p_limits[lo:hi], p_windows[c], p_nows[c]) t;
        END LOOP;
      END
      $$;
    `,
  },
  {
    version: 11,
    // Keys with settings (store/key-usage.ts encodes them as one JSON text), the key a hold and a
    // record were made with, each key's spend counters, and the account's notice settings. The key's
    // limit is checked in junction_reserve_key, under the account's ledger row lock that every hold
    // takes (a key belongs to one account, so its holds are serialised with the account's); its
    // counters are added to by junction_key_charge in the statement that settles (postgres.ts).
    name: 'key settings, key spend and limits, account notices',
    sql: `
      ALTER TABLE api_keys ADD COLUMN settings text NOT NULL DEFAULT '{}';
      ALTER TABLE accounts ADD COLUMN notices text NOT NULL DEFAULT '{}';
      ALTER TABLE reservations ADD COLUMN key_hash text;
      ALTER TABLE generations ADD COLUMN key_hash text;
      CREATE INDEX generations_by_key ON generations (account_id, key_hash, seq) WHERE key_hash IS NOT NULL;

      -- Each window's sum belongs to the window starting at its *_start (Unix ms, computed by the caller).
      CREATE TABLE key_usage (
        key_hash text PRIMARY KEY,
        total numeric(40, 0) NOT NULL,
        day_start bigint NOT NULL,
        day numeric(40, 0) NOT NULL,
        week_start bigint NOT NULL,
        week numeric(40, 0) NOT NULL,
        month_start bigint NOT NULL,
        month numeric(40, 0) NOT NULL
      );

      -- What a key may still hold: p_limit less its spend in the window starting at p_window_start
      -- (p_reset daily, weekly, monthly; NULL: everything it spent) and its open holds.
      CREATE FUNCTION junction_key_room(
        p_account text, p_key text, p_limit numeric, p_reset text, p_window_start bigint, p_now bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_spent numeric;
        v_held numeric;
      BEGIN
        SELECT CASE p_reset
            WHEN 'daily' THEN CASE WHEN day_start = p_window_start THEN day ELSE 0 END
            WHEN 'weekly' THEN CASE WHEN week_start = p_window_start THEN week ELSE 0 END
            WHEN 'monthly' THEN CASE WHEN month_start = p_window_start THEN month ELSE 0 END
            ELSE total END
          INTO v_spent FROM key_usage WHERE key_hash = p_key;
        SELECT coalesce(sum(amount), 0) INTO v_held FROM reservations
          WHERE account_id = p_account AND key_hash = p_key AND expires_at > p_now;
        RETURN p_limit - coalesce(v_spent, 0) - v_held;
      END
      $$;

      -- junction_reserve for a request made with a key: the hold carries the key's hash and, when the
      -- key has a limit (p_limit not NULL), is at most what the key has left. NULL: unknown account or
      -- nothing available; -1: the key has nothing left.
      CREATE FUNCTION junction_reserve_key(
        p_account text, p_id text, p_upper numeric, p_expires_at bigint, p_now bigint,
        p_key text, p_limit numeric, p_reset text, p_window_start bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        avail numeric;
        room numeric;
        held numeric;
      BEGIN
        -- The account's balance, as junction_reserve.
        SELECT credits - usage INTO avail FROM ledger WHERE account_id = p_account FOR NO KEY UPDATE;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        SELECT avail - coalesce(sum(amount), 0) INTO avail FROM reservations
          WHERE account_id = p_account AND expires_at > p_now;
        IF avail <= 0 THEN
          RETURN NULL;
        END IF;
        held := least(p_upper, avail);
        -- The key's limit, read after the same lock.
        IF p_limit IS NOT NULL THEN
          room := junction_key_room(p_account, p_key, p_limit, p_reset, p_window_start, p_now);
          IF room <= 0 THEN
            RETURN -1;
          END IF;
          held := least(held, room);
        END IF;
        INSERT INTO reservations (account_id, id, amount, expires_at, key_hash)
          VALUES (p_account, p_id, held, p_expires_at, p_key)
          ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount,
            expires_at = excluded.expires_at, key_hash = excluded.key_hash;
        RETURN held;
      END
      $$;

      -- The settles of junction_settle_many, each given the key of its hold when it names none.
      CREATE FUNCTION junction_key_prepare(p jsonb) RETURNS jsonb LANGUAGE sql STABLE AS $$
        SELECT coalesce(jsonb_agg(CASE WHEN x->>'key' IS NULL AND r.key_hash IS NOT NULL
            THEN x || jsonb_build_object('key', r.key_hash) ELSE x END ORDER BY t.i), '[]'::jsonb)
        FROM jsonb_array_elements(p) WITH ORDINALITY AS t(x, i)
        LEFT JOIN reservations r ON x->>'key' IS NULL AND r.account_id = x->>'a' AND r.id = x->>'ref'
      $$;

      -- After junction_settle_many(p) charged p_costs (NULL: a repeat, nothing charged): names each
      -- charged record's key and adds its charge to the key's counters (kd, kw, km: the UTC day, week
      -- and month its record was created in; a window already past counts only in the total).
      -- Returns p_costs.
      CREATE FUNCTION junction_key_charge(p jsonb, p_costs numeric[]) RETURNS numeric[]
        LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        e jsonb;
        i integer := 0;
        c numeric;
      BEGIN
        FOR e IN SELECT x FROM jsonb_array_elements(p) AS x LOOP
          i := i + 1;
          c := p_costs[i];
          CONTINUE WHEN c IS NULL OR e->>'key' IS NULL;
          UPDATE generations SET key_hash = e->>'key' WHERE generation_id = e->>'id';
          INSERT INTO key_usage AS u (key_hash, total, day_start, day, week_start, week, month_start, month)
            VALUES (e->>'key', c, (e->>'kd')::bigint, c, (e->>'kw')::bigint, c, (e->>'km')::bigint, c)
            ON CONFLICT (key_hash) DO UPDATE SET
              total = u.total + c,
              day = CASE WHEN excluded.day_start > u.day_start THEN c
                WHEN excluded.day_start = u.day_start THEN u.day + c ELSE u.day END,
              day_start = greatest(u.day_start, excluded.day_start),
              week = CASE WHEN excluded.week_start > u.week_start THEN c
                WHEN excluded.week_start = u.week_start THEN u.week + c ELSE u.week END,
              week_start = greatest(u.week_start, excluded.week_start),
              month = CASE WHEN excluded.month_start > u.month_start THEN c
                WHEN excluded.month_start = u.month_start THEN u.month + c ELSE u.month END,
              month_start = greatest(u.month_start, excluded.month_start);
        END LOOP;
        RETURN p_costs;
      END
      $$;
    `,
  },
  {
    version: 12,
    name: "generations by account and time (the console's activity report)",
    sql: `CREATE INDEX generations_account_created ON generations (account_id, created_at);
      CREATE INDEX tasks_account ON tasks (account_id, seq);
      CREATE INDEX webhook_deliveries_account ON webhook_deliveries (account_id, seq);`,
  },
  {
    version: 13,
    // Fewer round trips a request (postgres.ts): the two admission steps become one statement each
    // (the limits and the balance read before the body; the limits and the hold after it), batched
    // like the rest, and API-key lookups are answered from each instance's memory, told to forget
    // by a notification whenever accounts or keys change in any instance. A key's limit (migration
    // 11) is checked where every hold is decided (junction_reserve_key, junction_reserve_many), and
    // its charge made in the settle's transaction (junction_settle_durably).
    name: 'held total on the ledger row, fused admission, account change notifications',
    sql: `
      -- The sum of every hold of the account, open or expired, kept on its ledger row by triggers on
      -- reservations (one update per account per statement), so that the open holds are read without
      -- summing them: a busy account's reservations are inserted and deleted by the thousand, and
      -- until vacuum passes a sum over them reads every dead row as well (measured: 2 ms for 20 000).
      -- The triggers come first: their lock on reservations keeps writers out until the total is
      -- computed and committed.
      ALTER TABLE ledger ADD COLUMN held numeric(40, 0) NOT NULL DEFAULT 0;
      CREATE FUNCTION junction_held_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held + d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM new_rows GROUP BY account_id) d
          WHERE l.account_id = d.account_id;
        RETURN NULL;
      END
      $$;
      CREATE FUNCTION junction_held_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held - d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM old_rows GROUP BY account_id) d
          WHERE l.account_id = d.account_id;
        RETURN NULL;
      END
      $$;
      CREATE FUNCTION junction_held_updated() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held + d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM (
                  SELECT account_id, amount FROM new_rows
                  UNION ALL SELECT account_id, -amount FROM old_rows) c
                GROUP BY account_id) d
          WHERE l.account_id = d.account_id AND d.amount <> 0;
        RETURN NULL;
      END
      $$;
      CREATE TRIGGER reservations_inserted AFTER INSERT ON reservations REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION junction_held_inserted();
      CREATE TRIGGER reservations_deleted AFTER DELETE ON reservations REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION junction_held_deleted();
      CREATE TRIGGER reservations_updated AFTER UPDATE ON reservations
        REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION junction_held_updated();
      UPDATE ledger l SET held = coalesce((SELECT sum(amount) FROM reservations r WHERE r.account_id = l.account_id), 0);
      -- The expired holds not swept yet are few: read through this index, they are subtracted.
      CREATE INDEX reservations_account_expiry ON reservations (account_id, expires_at);
      DROP INDEX reservations_expiry;

      -- The open (unexpired at p_now) holds of an account whose ledger row says p_held in all.
      CREATE FUNCTION junction_open_held(p_account text, p_held numeric, p_now bigint) RETURNS numeric
        LANGUAGE sql STABLE AS $$
        SELECT p_held - coalesce((SELECT sum(amount) FROM reservations
          WHERE account_id = p_account AND expires_at <= p_now), 0)
      $$;

      -- junction_reserve (migration 2) with the open holds read from the ledger row it locks.
      CREATE OR REPLACE FUNCTION junction_reserve(
        p_account text, p_id text, p_upper numeric, p_expires_at bigint, p_now bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        avail numeric;
        v_all numeric;
        held numeric;
      BEGIN
        SELECT credits - usage, ledger.held INTO avail, v_all FROM ledger
          WHERE account_id = p_account FOR NO KEY UPDATE;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        avail := avail - junction_open_held(p_account, v_all, p_now);
        IF avail <= 0 THEN
          RETURN NULL;
        END IF;
        held := least(p_upper, avail);
        INSERT INTO reservations (account_id, id, amount, expires_at)
          VALUES (p_account, p_id, held, p_expires_at)
          ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount, expires_at = excluded.expires_at;
        RETURN held;
      END
      $$;

      -- junction_reserve_key (migration 11) with the account's open holds read from the ledger row it
      -- locks. The key's own open holds are still summed (junction_key_room): a key's holds are few.
      CREATE OR REPLACE FUNCTION junction_reserve_key(
        p_account text, p_id text, p_upper numeric, p_expires_at bigint, p_now bigint,
        p_key text, p_limit numeric, p_reset text, p_window_start bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        avail numeric;
        v_all numeric;
        room numeric;
        held numeric;
      BEGIN
        SELECT credits - usage, ledger.held INTO avail, v_all FROM ledger
          WHERE account_id = p_account FOR NO KEY UPDATE;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        avail := avail - junction_open_held(p_account, v_all, p_now);
        IF avail <= 0 THEN
          RETURN NULL;
        END IF;
        held := least(p_upper, avail);
        -- The key's limit, read after the same lock.
        IF p_limit IS NOT NULL THEN
          room := junction_key_room(p_account, p_key, p_limit, p_reset, p_window_start, p_now);
          IF room <= 0 THEN
            RETURN -1;
          END IF;
          held := least(held, room);
        END IF;
        INSERT INTO reservations (account_id, id, amount, expires_at, key_hash)
          VALUES (p_account, p_id, held, p_expires_at, p_key)
          ON CONFLICT (account_id, id) DO UPDATE SET amount = excluded.amount,
            expires_at = excluded.expires_at, key_hash = excluded.key_hash;
        RETURN held;
      END
      $$;

      -- junction_reserve_many (migration 10) with the open holds read from the ledger rows it locks,
      -- and each call's key (p_keys[i], NULL: none): the hold names it and, when the key has a limit
      -- (p_limits[i] not NULL), is at most what the key has left less what the batch's earlier calls
      -- took for it, all under the account's ledger row lock (a key belongs to one account), as
      -- junction_reserve_key. Per call: the amount held, NULL when the account has nothing left, -1
      -- when the key has nothing left. The one place (with junction_reserve_key) a hold is decided.
      DROP FUNCTION junction_reserve_many(text[], text[], numeric[], bigint[], bigint[]);
      CREATE FUNCTION junction_reserve_many(
        p_accounts text[], p_ids text[], p_uppers numeric[], p_expires bigint[], p_nows bigint[],
        p_keys text[], p_limits numeric[], p_resets text[], p_starts bigint[]
      ) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        n integer := coalesce(array_length(p_accounts, 1), 0);
        v_out numeric[] := '{}';
        v_base numeric[];
        v_accts text[] := '{}';
        v_taken numeric[] := '{}';
        v_keys text[] := '{}';
        v_key_taken numeric[] := '{}';
        v_free numeric;
        v_room numeric;
        v_held numeric;
        k integer;
        j integer;
        i integer;
      BEGIN
        PERFORM 1 FROM ledger WHERE account_id = ANY (p_accounts) ORDER BY account_id FOR NO KEY UPDATE;
        IF (SELECT count(DISTINCT (a, d)) FROM unnest(p_accounts, p_ids) AS t(a, d)) < n
          OR (SELECT min(e) FROM unnest(p_expires) AS e) <= (SELECT max(t) FROM unnest(p_nows) AS t)
          OR EXISTS (SELECT 1 FROM reservations r JOIN unnest(p_accounts, p_ids) AS t(a, d)
                     ON r.account_id = t.a AND r.id = t.d) THEN
          FOR i IN 1 .. n LOOP
            v_out := array_append(v_out, junction_reserve_key(p_accounts[i], p_ids[i], p_uppers[i],
              p_expires[i], p_nows[i], p_keys[i], p_limits[i], p_resets[i], p_starts[i]));
          END LOOP;
          RETURN v_out;
        END IF;
        -- What each call would find free before the batch's own holds (NULL: unknown account).
        WITH pairs AS (SELECT DISTINCT a, t FROM unnest(p_accounts, p_nows) AS u(a, t)),
          free AS (
            SELECT p.a, p.t, l.credits - l.usage - junction_open_held(p.a, l.held, p.t) AS f
            FROM pairs p JOIN ledger l ON l.account_id = p.a)
        SELECT array_agg(free.f ORDER BY u.i) INTO v_base
          FROM unnest(p_accounts, p_nows) WITH ORDINALITY AS u(a, t, i)
          LEFT JOIN free ON free.a = u.a AND free.t = u.t;
        FOR i IN 1 .. n LOOP
          v_held := NULL;
          IF v_base[i] IS NOT NULL THEN
            k := array_position(v_accts, p_accounts[i]);
            IF k IS NULL THEN
              v_accts := array_append(v_accts, p_accounts[i]);
              v_taken := array_append(v_taken, 0::numeric);
              k := array_length(v_accts, 1);
            END IF;
            v_free := v_base[i] - v_taken[k];
            IF v_free > 0 THEN
              v_held := least(p_uppers[i], v_free);
              IF p_limits[i] IS NOT NULL THEN
                j := array_position(v_keys, p_keys[i]);
                IF j IS NULL THEN
                  v_keys := array_append(v_keys, p_keys[i]);
                  v_key_taken := array_append(v_key_taken, 0::numeric);
                  j := array_length(v_keys, 1);
                END IF;
                v_room := junction_key_room(p_accounts[i], p_keys[i], p_limits[i], p_resets[i],
                  p_starts[i], p_nows[i]) - v_key_taken[j];
                IF v_room <= 0 THEN
                  v_held := -1;
                ELSE
                  v_held := least(v_held, v_room);
                  v_key_taken[j] := v_key_taken[j] + v_held;
                END IF;
              END IF;
              IF v_held > 0 THEN
                v_taken[k] := v_taken[k] + v_held;
              END IF;
            END IF;
          END IF;
          v_out := array_append(v_out, v_held);
        END LOOP;
        INSERT INTO reservations (account_id, id, amount, expires_at, key_hash)
          SELECT u.a, u.d, u.h, u.e, p_keys[u.i]
          FROM unnest(p_accounts, p_ids, v_out, p_expires) WITH ORDINALITY AS u(a, d, h, e, i)
          WHERE u.h > 0;
        RETURN v_out;
      END
      $$;

      -- junction_charge_ceiling (migration 8) with the other holds read from the ledger row.
      CREATE OR REPLACE FUNCTION junction_charge_ceiling(
        p_account text, p_id text, p_held numeric, p_now bigint, p_cost numeric
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_free numeric;
        v_all numeric;
        v_overdraft numeric;
        v_own numeric;
        v_held numeric;
        v_ceiling numeric;
      BEGIN
        SELECT amount INTO v_own FROM reservations
          WHERE account_id = p_account AND id = p_id AND expires_at > p_now;
        IF FOUND AND p_cost <= coalesce(p_held, v_own) THEN
          RETURN p_cost;
        END IF;
        v_held := coalesce(p_held, v_own);
        SELECT l.credits - l.usage, l.held, greatest(a.overdraft, 0) INTO v_free, v_all, v_overdraft
          FROM ledger l JOIN accounts a ON a.id = l.account_id
          WHERE l.account_id = p_account FOR NO KEY UPDATE OF l;
        IF NOT FOUND THEN
          RETURN NULL;
        END IF;
        -- Read again after the lock: the hold may have gone meanwhile.
        SELECT amount INTO v_own FROM reservations
          WHERE account_id = p_account AND id = p_id AND expires_at > p_now;
        v_free := v_free - (junction_open_held(p_account, v_all, p_now) - coalesce(v_own, 0));
        v_ceiling := v_free + v_overdraft;
        IF v_held IS NOT NULL THEN
          v_ceiling := least(v_ceiling, v_held + v_overdraft);
        END IF;
        RETURN greatest(v_ceiling, 0);
      END
      $$;

      -- Settles a batch in the order of its items, each under the locked ledger row (migration 10's
      -- junction_settle_many, renamed): what a batch does when some charge must be capped.
      CREATE FUNCTION junction_settle_each(p jsonb) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        e jsonb;
        v_cost numeric;
        v_full numeric;
        v_hold numeric;
        v_charged numeric;
        v_out numeric[] := '{}';
        v_accts text[] := '{}';
        v_pending numeric[] := '{}';
        k integer;
      BEGIN
        PERFORM 1 FROM ledger WHERE account_id IN (SELECT x->>'a' FROM jsonb_array_elements(p) x)
          ORDER BY account_id FOR NO KEY UPDATE;
        FOR e IN SELECT x FROM jsonb_array_elements(p) AS x LOOP
          v_full := (e->>'cost')::numeric;
          k := array_position(v_accts, e->>'a');
          IF k IS NULL THEN
            v_accts := array_append(v_accts, e->>'a');
            v_pending := array_append(v_pending, 0::numeric);
            k := array_length(v_accts, 1);
          END IF;
          SELECT amount INTO v_hold FROM reservations
            WHERE account_id = e->>'a' AND id = e->>'ref' AND expires_at > (e->>'now')::bigint;
          IF FOUND AND v_full <= coalesce((e->>'held')::numeric, v_hold) THEN
            v_cost := v_full;
          ELSE
            IF v_pending[k] <> 0 THEN
              UPDATE ledger SET usage = usage + v_pending[k] WHERE account_id = e->>'a';
              v_pending[k] := 0;
            END IF;
            v_cost := least(v_full, junction_charge_ceiling(e->>'a', e->>'ref', (e->>'held')::numeric,
              (e->>'now')::bigint, v_full));
          END IF;
          v_charged := NULL;
          INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
              generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
              upstream_cost, discount_ppm, discount, cost, attempts, unbilled_usd, unbilled_tokens, key_hash)
            VALUES (e->>'id', e->>'a', e->>'api', e->>'model', e->>'provider', (e->>'createdAt')::bigint,
              (e->>'generationTimeMs')::bigint, (e->>'latencyMs')::bigint, (e->>'streamed')::boolean,
              e->>'finishReason', (e->>'cancelled')::boolean, e->>'costSource', e->'usage',
              (e->>'upstreamCost')::numeric, (e->>'discountPpm')::integer, (e->>'discount')::numeric,
              v_cost, CASE WHEN jsonb_typeof(e->'attempts') = 'array' THEN e->'attempts' END,
              CASE WHEN v_cost < v_full THEN v_full - v_cost END,
              CASE WHEN v_cost < v_full
                THEN floor(((e->>'tokens')::numeric * (v_full - v_cost) * 2 + v_full) / (2 * v_full)) END,
              e->>'key')
            ON CONFLICT (generation_id) DO NOTHING RETURNING cost INTO v_charged;
          IF v_charged IS NOT NULL THEN
            DELETE FROM reservations WHERE account_id = e->>'a' AND id = e->>'ref';
            v_pending[k] := v_pending[k] + v_charged;
          END IF;
          v_out := array_append(v_out, v_charged);
        END LOOP;
        UPDATE ledger l SET usage = l.usage + c.amount
          FROM unnest(v_accts, v_pending) AS c(a, amount)
          WHERE l.account_id = c.a AND c.amount <> 0;
        RETURN v_out;
      END
      $$;

      -- The usual batch, where every new charge is within its open hold: charged as it is, so no
      -- balance is read and the order of the items does not matter. The records are inserted first,
      -- in one statement, before any ledger row is locked; then the rows are locked (in account order,
      -- as everywhere), the holds checked under the lock (none can go meanwhile: whoever deletes one
      -- locks its ledger row first) and dropped in one statement, and each account charged once. A
      -- hot account's row is thus held only for that end of the batch and its commit. When some
      -- charge is not within its open hold (or a generation id comes twice) it raises JU001, which
      -- rolls its writes back, and junction_settle_many settles the batch item by item instead.
      CREATE FUNCTION junction_settle_within_holds(p jsonb) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_ids text[];
        v_accts text[];
        v_refs text[];
        v_costs numeric[];
        v_helds numeric[];
        v_nows bigint[];
        v_new text[];
        v_out numeric[];
      BEGIN
        SELECT array_agg(e->>'id' ORDER BY i), array_agg(e->>'a' ORDER BY i), array_agg(e->>'ref' ORDER BY i),
            array_agg((e->>'cost')::numeric ORDER BY i), array_agg((e->>'held')::numeric ORDER BY i),
            array_agg((e->>'now')::bigint ORDER BY i)
          INTO v_ids, v_accts, v_refs, v_costs, v_helds, v_nows
          FROM jsonb_array_elements(p) WITH ORDINALITY AS x(e, i);
        IF (SELECT count(DISTINCT d) FROM unnest(v_ids) AS d) < cardinality(v_ids) THEN
          RAISE EXCEPTION 'a generation id twice in one batch' USING ERRCODE = 'JU001';
        END IF;
        WITH ins AS (
          INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
              generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
              upstream_cost, discount_ppm, discount, cost, attempts, key_hash)
            SELECT e->>'id', e->>'a', e->>'api', e->>'model', e->>'provider', (e->>'createdAt')::bigint,
              (e->>'generationTimeMs')::bigint, (e->>'latencyMs')::bigint, (e->>'streamed')::boolean,
              e->>'finishReason', (e->>'cancelled')::boolean, e->>'costSource', e->'usage',
              (e->>'upstreamCost')::numeric, (e->>'discountPpm')::integer, (e->>'discount')::numeric,
              (e->>'cost')::numeric, CASE WHEN jsonb_typeof(e->'attempts') = 'array' THEN e->'attempts' END,
              e->>'key'
            FROM jsonb_array_elements(p) AS e
            ON CONFLICT (generation_id) DO NOTHING RETURNING generation_id)
        SELECT coalesce(array_agg(generation_id), '{}') INTO v_new FROM ins;
        PERFORM 1 FROM ledger WHERE account_id IN (
            SELECT s.a FROM unnest(v_ids, v_accts) AS s(id, a) WHERE s.id = ANY (v_new))
          ORDER BY account_id FOR NO KEY UPDATE;
        IF EXISTS (SELECT 1 FROM unnest(v_ids, v_accts, v_refs, v_costs, v_helds, v_nows)
              AS s(id, a, ref, cost, held, now)
            WHERE s.id = ANY (v_new) AND NOT EXISTS (
              SELECT 1 FROM reservations r WHERE r.account_id = s.a AND r.id = s.ref AND r.expires_at > s.now
                AND s.cost <= coalesce(s.held, r.amount))) THEN
          RAISE EXCEPTION 'a charge past its hold' USING ERRCODE = 'JU001';
        END IF;
        DELETE FROM reservations r USING unnest(v_ids, v_accts, v_refs) AS s(id, a, ref)
          WHERE s.id = ANY (v_new) AND r.account_id = s.a AND r.id = s.ref;
        UPDATE ledger l SET usage = l.usage + c.amount
          FROM (SELECT s.a, sum(s.cost) AS amount FROM unnest(v_ids, v_accts, v_costs) AS s(id, a, cost)
                WHERE s.id = ANY (v_new) GROUP BY s.a) c
          WHERE l.account_id = c.a AND c.amount <> 0;
        SELECT array_agg(CASE WHEN s.id = ANY (v_new) THEN s.cost END ORDER BY s.i) INTO v_out
          FROM unnest(v_ids, v_costs) WITH ORDINALITY AS s(id, cost, i);
        RETURN v_out;
      END
      $$;

      -- junction_settle_many (migration 10): the usual batch as one, else item by item.
      CREATE OR REPLACE FUNCTION junction_settle_many(p jsonb) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        BEGIN
          RETURN junction_settle_within_holds(p);
        EXCEPTION WHEN SQLSTATE 'JU001' THEN
          NULL;
        END;
        RETURN junction_settle_each(p);
      END
      $$;

      -- junction_key_charge (migration 11) without naming the record's key afterwards: the records are
      -- inserted with it (junction_settle_within_holds, junction_settle_each), which saves an update.
      CREATE OR REPLACE FUNCTION junction_key_charge(p jsonb, p_costs numeric[]) RETURNS numeric[]
        LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        e jsonb;
        i integer := 0;
        c numeric;
      BEGIN
        FOR e IN SELECT x FROM jsonb_array_elements(p) AS x LOOP
          i := i + 1;
          c := p_costs[i];
          CONTINUE WHEN c IS NULL OR e->>'key' IS NULL;
          INSERT INTO key_usage AS u (key_hash, total, day_start, day, week_start, week, month_start, month)
            VALUES (e->>'key', c, (e->>'kd')::bigint, c, (e->>'kw')::bigint, c, (e->>'km')::bigint, c)
            ON CONFLICT (key_hash) DO UPDATE SET
              total = u.total + c,
              day = CASE WHEN excluded.day_start > u.day_start THEN c
                WHEN excluded.day_start = u.day_start THEN u.day + c ELSE u.day END,
              day_start = greatest(u.day_start, excluded.day_start),
              week = CASE WHEN excluded.week_start > u.week_start THEN c
                WHEN excluded.week_start = u.week_start THEN u.week + c ELSE u.week END,
              week_start = greatest(u.week_start, excluded.week_start),
              month = CASE WHEN excluded.month_start > u.month_start THEN c
                WHEN excluded.month_start = u.month_start THEN u.month + c ELSE u.month END,
              month_start = greatest(u.month_start, excluded.month_start);
        END LOOP;
        RETURN p_costs;
      END
      $$;

      -- junction_settle_many, committed so that the ledger rows it locked are free before the disk is
      -- waited for: its own commit does not wait (its locks go at once), then a second transaction
      -- writes one WAL record and commits durably, which writes everything before it to disk first,
      -- the settle's commit included. The caller hears back only then. Should the database crash in
      -- between, what is lost is the settle and everything committed after it (WAL is replayed in
      -- order), never a later change without it; the caller saw an error, and settling again is safe.
      -- Each charged record's key is charged in the same (first) transaction, by junction_key_charge;
      -- an item naming no key takes its hold's (junction_key_prepare), looked up only when some item
      -- names none. (Called with CALL, outside any transaction block.)
      CREATE PROCEDURE junction_settle_durably(p jsonb, INOUT costs text[] DEFAULT NULL)
        LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        IF EXISTS (SELECT 1 FROM jsonb_array_elements(p) AS x WHERE x->>'key' IS NULL) THEN
          p := junction_key_prepare(p);
        END IF;
        costs := junction_key_charge(p, junction_settle_many(p))::text[];
        COMMIT;
        PERFORM pg_logical_emit_message(true, 'junction', 'settled');
      END
      $$;

      -- Several rate-limit corrections (the adjust statement of postgres.ts, one after another), the
      -- windows locked first in key order, as junction_consume_many locks them. Not money: the commit
      -- does not wait for the disk.
      CREATE FUNCTION junction_adjust_many(
        p_keys text[], p_deltas bigint[], p_windows bigint[], p_nows bigint[]
      ) RETURNS void LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        i integer;
        v_start bigint;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
          SELECT k, p_windows[1], p_nows[1] - p_nows[1] % p_windows[1], 0, 0
          FROM (SELECT DISTINCT unnest(p_keys) AS k) u ORDER BY k
          ON CONFLICT (key) DO UPDATE SET key = r.key;
        FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
          v_start := p_nows[i] - p_nows[i] % p_windows[i];
          UPDATE rate_windows r SET
            window_ms = p_windows[i],
            start = v_start,
            previous = CASE WHEN r.start = v_start THEN r.previous
              WHEN v_start - r.start = p_windows[i] THEN r.current ELSE 0 END,
            current = greatest(0, CASE WHEN r.start = v_start THEN r.current ELSE 0 END + p_deltas[i])
            WHERE r.key = p_keys[i];
        END LOOP;
      END
      $$;

      -- Tells every listening instance (LISTEN junction_accounts) that an account or a key changed:
      -- their caches of key lookups are then stale. One notification per statement, sent at commit.
      CREATE FUNCTION junction_accounts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_notify('junction_accounts', '');
        RETURN NULL;
      END
      $$;
      CREATE TRIGGER accounts_changed AFTER UPDATE OR DELETE OR TRUNCATE ON accounts
        FOR EACH STATEMENT EXECUTE FUNCTION junction_accounts_changed();
      CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE OR TRUNCATE ON api_keys
        FOR EACH STATEMENT EXECUTE FUNCTION junction_accounts_changed();

      -- Admission before the body for a batch of calls: call c has the rate checks p_first[c] ..
      -- p_first[c] + p_count[c] - 1 of the flat arrays (junction_consume_many), and, when
      -- p_accounts[c] is not NULL, asks whether that account has anything left to hold at its now
      -- (credits - usage - open holds above zero: a read; the hold decides exactly later). Rows: one
      -- per check (fits, used), then one per call that asked about credits (has).
      CREATE FUNCTION junction_before_body_many(
        p_first integer[], p_count integer[], p_windows bigint[], p_nows bigint[],
        p_keys text[], p_amounts bigint[], p_limits bigint[], p_accounts text[]
      ) RETURNS TABLE (call integer, fits boolean, used bigint, has boolean) LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        IF coalesce(array_length(p_keys, 1), 0) > 0 THEN
          RETURN QUERY SELECT m.call, m.fits, m.used, NULL::boolean
            FROM junction_consume_many(p_first, p_count, p_windows, p_nows, p_keys, p_amounts, p_limits) m;
        END IF;
        RETURN QUERY
          WITH pairs AS (SELECT DISTINCT a, t FROM unnest(p_accounts, p_nows) AS u(a, t) WHERE a IS NOT NULL),
            free AS (SELECT p.a, p.t, l.credits - l.usage - junction_open_held(p.a, l.held, p.t) > 0 AS has
              FROM pairs p LEFT JOIN ledger l ON l.account_id = p.a)
          SELECT u.i::integer, NULL::boolean, NULL::bigint, coalesce(free.has, false)
          FROM unnest(p_accounts, p_nows) WITH ORDINALITY AS u(a, t, i)
          JOIN free ON free.a = u.a AND free.t = u.t;
      END
      $$;

      -- A hold taken alone, without rate checks (the usual call at low load): junction_reserve_key
      -- (its key and the key's limit, when given) with the commit not waiting for the disk, as
      -- junction_admit_many's.
      CREATE FUNCTION junction_admit_one(
        p_account text, p_id text, p_upper numeric, p_expires_at bigint, p_now bigint,
        p_key text, p_limit numeric, p_reset text, p_window_start bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        RETURN junction_reserve_key(p_account, p_id, p_upper, p_expires_at, p_now,
          p_key, p_limit, p_reset, p_window_start);
      END
      $$;

      -- The same without keys (the ledger's own batched reserve).
      CREATE FUNCTION junction_reserve_many(
        p_accounts text[], p_ids text[], p_uppers numeric[], p_expires bigint[], p_nows bigint[]
      ) RETURNS numeric[] LANGUAGE sql VOLATILE AS $$
        SELECT junction_reserve_many(p_accounts, p_ids, p_uppers, p_expires, p_nows,
          NULL::text[], NULL::numeric[], NULL::text[], NULL::bigint[])
      $$;

      -- Admission with the hold for a batch of calls: the rate checks of every call as
      -- junction_consume_many counts them, then, for the calls whose checks all fit, the holds as
      -- junction_reserve_many takes them (the one place where a hold is decided). Rate windows are
      -- locked before ledger rows, as everywhere. Rows: one per check (fits, used), then one per call
      -- (its hold, NULL when refused or not tried, -1 when the key's limit refused it). The commit does
      -- not wait for the disk: a hold lost to a database crash only makes its request's charge go
      -- through the ceiling
      -- (junction_charge_ceiling), which keeps every balance within its bound; the settle that follows
      -- is durable, and makes the hold's commit durable with it.
      CREATE FUNCTION junction_admit_many(
        p_first integer[], p_count integer[], p_windows bigint[], p_nows bigint[],
        p_keys text[], p_amounts bigint[], p_limits bigint[],
        p_accounts text[], p_ids text[], p_uppers numeric[], p_expires bigint[],
        p_hold_keys text[], p_key_limits numeric[], p_key_resets text[], p_key_starts bigint[]
      ) RETURNS TABLE (call integer, fits boolean, used bigint, amount text) LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        n integer := coalesce(array_length(p_accounts, 1), 0);
        v_ok boolean[] := array_fill(true, ARRAY[n]);
        v_try integer[];
        v_held numeric[];
        c integer;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        IF coalesce(array_length(p_keys, 1), 0) > 0 THEN
          FOR c, fits, used IN
            SELECT m.call, m.fits, m.used
            FROM junction_consume_many(p_first, p_count, p_windows, p_nows, p_keys, p_amounts, p_limits) m
          LOOP
            call := c;
            amount := NULL;
            RETURN NEXT;
            IF NOT fits THEN
              v_ok[c] := false;
            END IF;
          END LOOP;
        END IF;
        SELECT array_agg(i ORDER BY i) INTO v_try FROM generate_series(1, n) AS i WHERE v_ok[i];
        IF v_try IS NOT NULL THEN
          v_held := junction_reserve_many(
            (SELECT array_agg(p_accounts[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_ids[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_uppers[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_expires[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_nows[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_hold_keys[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_limits[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_resets[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_starts[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)));
          RETURN QUERY SELECT t.i, NULL::boolean, NULL::bigint, h::text
            FROM unnest(v_try, v_held) AS t(i, h);
        END IF;
      END
      $$;
    `,
  },
  {
    version: 14,
    // A task's upstream calls so far (store/tasks.ts TaskRecord.attempts), its generation record's
    // `attempts` when it is billed; NULL: none yet, or a task stored before they were kept.
    name: 'task attempts',
    sql: `ALTER TABLE tasks ADD COLUMN attempts json;`,
  },
  {
    version: 15,
    // junction_consume_many (migration 10) decided each call by running junction_consume for it: per
    // call an upsert, a roll-over, a read per check and an update of the same rows, so a batch of n
    // calls on one account's windows wrote each window row n times in one transaction (each later
    // statement walking the versions before it). Now the windows are locked and read once, the calls
    // are decided in order in memory exactly as before, and each window is written once.
    name: 'rate windows of a batch decided in memory',
    sql: `
      CREATE OR REPLACE FUNCTION junction_consume_many(
        p_first integer[], p_count integer[], p_windows bigint[], p_nows bigint[],
        p_keys text[], p_amounts bigint[], p_limits bigint[]
      ) RETURNS TABLE (call integer, fits boolean, used bigint) LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_keys text[];
        v_start bigint[];
        v_prev bigint[];
        v_cur bigint[];
        v_win bigint[];
        v_fits boolean[];
        v_used bigint[];
        v_all boolean;
        v_at bigint;
        v_weight float8;
        v_before bigint;
        v_n bigint;
        c integer;
        i integer;
        j integer;
        k integer;
        lo integer;
        hi integer;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        IF coalesce(array_length(p_keys, 1), 0) = 0 THEN
          RETURN;
        END IF;
        -- Missing windows created, and every window of the batch locked, in key order (no deadlocks).
        INSERT INTO rate_windows AS r (key, window_ms, start, current, previous)
          SELECT u.k, p_windows[1], p_nows[1] - p_nows[1] % p_windows[1], 0, 0
          FROM (SELECT DISTINCT unnest(p_keys) AS k) u ORDER BY u.k
          ON CONFLICT (key) DO UPDATE SET key = r.key;
        SELECT array_agg(r.key ORDER BY r.key), array_agg(r.start ORDER BY r.key),
            array_agg(r.previous ORDER BY r.key), array_agg(r.current ORDER BY r.key),
            array_agg(r.window_ms ORDER BY r.key)
          INTO v_keys, v_start, v_prev, v_cur, v_win
          FROM rate_windows r WHERE r.key = ANY (p_keys);
        -- Each call as junction_consume decides it: its windows rolled over to its now, judged, and
        -- counted only if every check fits.
        FOR c IN 1 .. coalesce(array_length(p_first, 1), 0) LOOP
          lo := p_first[c];
          hi := p_first[c] + p_count[c] - 1;
          v_at := p_nows[c] - p_nows[c] % p_windows[c];
          v_weight := 1 - (p_nows[c] - v_at)::float8 / p_windows[c]::float8;
          FOR i IN lo .. hi LOOP
            k := array_position(v_keys, p_keys[i]);
            IF v_start[k] <> v_at THEN
              v_prev[k] := CASE WHEN v_at - v_start[k] = p_windows[c] THEN v_cur[k] ELSE 0 END;
              v_cur[k] := 0;
              v_start[k] := v_at;
              v_win[k] := p_windows[c];
            END IF;
          END LOOP;
          v_fits := '{}';
          v_used := '{}';
          v_all := true;
          FOR i IN lo .. hi LOOP
            k := array_position(v_keys, p_keys[i]);
            -- What earlier checks of this call would add, should one key appear twice.
            v_before := 0;
            FOR j IN lo .. i - 1 LOOP
              IF p_keys[j] = p_keys[i] THEN
                v_before := v_before + p_amounts[j];
              END IF;
            END LOOP;
            v_n := ceil(v_prev[k]::float8 * v_weight)::bigint + v_cur[k] + v_before;
            v_used := v_used || v_n;
            v_fits := v_fits || (v_n + p_amounts[i] <= p_limits[i]);
            v_all := v_all AND v_n + p_amounts[i] <= p_limits[i];
          END LOOP;
          IF v_all THEN
            FOR i IN lo .. hi LOOP
              k := array_position(v_keys, p_keys[i]);
              v_cur[k] := v_cur[k] + p_amounts[i];
            END LOOP;
          END IF;
          FOR i IN 1 .. coalesce(array_length(v_fits, 1), 0) LOOP
            call := c;
            fits := v_fits[i];
            used := v_used[i];
            RETURN NEXT;
          END LOOP;
        END LOOP;
        UPDATE rate_windows r
          SET start = w.w_start, previous = w.w_prev, current = w.w_cur, window_ms = w.w_win
          FROM unnest(v_keys, v_start, v_prev, v_cur, v_win) AS w(w_key, w_start, w_prev, w_cur, w_win)
          WHERE r.key = w.w_key;
      END
      $$;
    `,
  },
  {
    version: 16,
    // junction_open_held (migration 13) was a SQL function whose body holds a subquery, which the
    // planner does not inline: every transaction that called it planned that query again (≈0.1 ms
    // a call, measured with track_functions), while holding the account's ledger row lock. A PL/pgSQL
    // function keeps the plan of its query for the session. Same arguments, same result.
    name: 'open holds read with a kept plan',
    sql: `
      CREATE OR REPLACE FUNCTION junction_open_held(p_account text, p_held numeric, p_now bigint)
        RETURNS numeric LANGUAGE plpgsql STABLE AS $$
      BEGIN
        RETURN p_held - coalesce((SELECT sum(amount) FROM reservations
          WHERE account_id = p_account AND expires_at <= p_now), 0);
      END
      $$;
    `,
  },
  {
    version: 17,
    // The holds made with each key, open or expired, summed on a row of key_held by the triggers that
    // keep the ledger rows' `held` (migration 13), so that a key's room (junction_key_room) and its usage
    // read one row: summing a key's open holds walked every open hold of the account (its expiry
    // index), and every hold deleted since the last vacuum. The table is locked first, so that no
    // writer (an older gateway included) slips a hold between the sum below and the new triggers.
    // Each trigger moves the ledger rows before the key rows, as every writer locks ledger rows first.
    name: 'held total per key',
    sql: `
      LOCK TABLE reservations IN SHARE ROW EXCLUSIVE MODE;
      CREATE TABLE key_held (key_hash text PRIMARY KEY, held numeric(40, 0) NOT NULL);
      INSERT INTO key_held (key_hash, held)
        SELECT key_hash, sum(amount) FROM reservations WHERE key_hash IS NOT NULL GROUP BY key_hash;
      CREATE OR REPLACE FUNCTION junction_held_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held + d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM new_rows GROUP BY account_id) d
          WHERE l.account_id = d.account_id;
        INSERT INTO key_held AS k (key_hash, held)
          SELECT key_hash, sum(amount) FROM new_rows WHERE key_hash IS NOT NULL
          GROUP BY key_hash ORDER BY key_hash
          ON CONFLICT (key_hash) DO UPDATE SET held = k.held + excluded.held;
        RETURN NULL;
      END
      $$;
      CREATE OR REPLACE FUNCTION junction_held_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held - d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM old_rows GROUP BY account_id) d
          WHERE l.account_id = d.account_id;
        UPDATE key_held k SET held = k.held - d.amount
          FROM (SELECT key_hash, sum(amount) AS amount FROM old_rows WHERE key_hash IS NOT NULL
                GROUP BY key_hash ORDER BY key_hash) d
          WHERE k.key_hash = d.key_hash;
        RETURN NULL;
      END
      $$;
      CREATE OR REPLACE FUNCTION junction_held_updated() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        UPDATE ledger l SET held = l.held + d.amount
          FROM (SELECT account_id, sum(amount) AS amount FROM (
                  SELECT account_id, amount FROM new_rows
                  UNION ALL SELECT account_id, -amount FROM old_rows) c
                GROUP BY account_id) d
          WHERE l.account_id = d.account_id AND d.amount <> 0;
        INSERT INTO key_held AS k (key_hash, held)
          SELECT key_hash, sum(amount) FROM (
              SELECT key_hash, amount FROM new_rows
              UNION ALL SELECT key_hash, -amount FROM old_rows) c
          WHERE key_hash IS NOT NULL GROUP BY key_hash HAVING sum(amount) <> 0 ORDER BY key_hash
          ON CONFLICT (key_hash) DO UPDATE SET held = k.held + excluded.held;
        RETURN NULL;
      END
      $$;

      -- junction_key_room (migration 11) with the key's open holds read from its key_held row, less the
      -- expired ones not swept yet (few, through the account's expiry index).
      CREATE OR REPLACE FUNCTION junction_key_room(
        p_account text, p_key text, p_limit numeric, p_reset text, p_window_start bigint, p_now bigint
      ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_spent numeric;
        v_held numeric;
      BEGIN
        SELECT CASE p_reset
            WHEN 'daily' THEN CASE WHEN day_start = p_window_start THEN day ELSE 0 END
            WHEN 'weekly' THEN CASE WHEN week_start = p_window_start THEN week ELSE 0 END
            WHEN 'monthly' THEN CASE WHEN month_start = p_window_start THEN month ELSE 0 END
            ELSE total END
          INTO v_spent FROM key_usage WHERE key_hash = p_key;
        SELECT held INTO v_held FROM key_held WHERE key_hash = p_key;
        v_held := coalesce(v_held, 0) - coalesce((SELECT sum(amount) FROM reservations
          WHERE account_id = p_account AND key_hash = p_key AND expires_at <= p_now), 0);
        RETURN p_limit - coalesce(v_spent, 0) - v_held;
      END
      $$;
    `,
  },
  {
    version: 18,
    // junction_key_prepare (migration 11) was a SQL function whose body holds a join, which the
    // planner does not inline: every settle batch with an item naming no key (a prediction's) planned
    // it again, 0.67 ms a call (track_functions, node bench/store-calls.ts postgres at 1 000 requests/s
    // without a key), inside the settle's transaction. A PL/pgSQL function keeps the plan of its query
    // for the session, as migration 16 did for junction_open_held. Same argument, same result.
    name: 'hold keys looked up with a kept plan',
    sql: `
      CREATE OR REPLACE FUNCTION junction_key_prepare(p jsonb) RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
      BEGIN
        RETURN (SELECT coalesce(jsonb_agg(CASE WHEN x->>'key' IS NULL AND r.key_hash IS NOT NULL
            THEN x || jsonb_build_object('key', r.key_hash) ELSE x END ORDER BY t.i), '[]'::jsonb)
          FROM jsonb_array_elements(p) WITH ORDINALITY AS t(x, i)
          LEFT JOIN reservations r ON x->>'key' IS NULL AND r.account_id = x->>'a' AND r.id = x->>'ref');
      END
      $$;
    `,
  },
  {
    version: 19,
    // junction_admit_many (migration 13) gathered the calls whose rate checks fitted into nine new
    // arrays (nine subqueries over unnest) and their numbers from generate_series, even when every
    // call fitted, as it does whenever the batch has no rate checks or none refused: then the arrays
    // it was given are passed on as they are. Same rows, in the same order; a batch with a refused
    // check goes the way it went.
    name: 'admission batches passed on whole',
    sql: `
      CREATE OR REPLACE FUNCTION junction_admit_many(
        p_first integer[], p_count integer[], p_windows bigint[], p_nows bigint[],
        p_keys text[], p_amounts bigint[], p_limits bigint[],
        p_accounts text[], p_ids text[], p_uppers numeric[], p_expires bigint[],
        p_hold_keys text[], p_key_limits numeric[], p_key_resets text[], p_key_starts bigint[]
      ) RETURNS TABLE (call integer, fits boolean, used bigint, amount text) LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        n integer := coalesce(array_length(p_accounts, 1), 0);
        v_ok boolean[] := array_fill(true, ARRAY[n]);
        v_refused boolean := false;
        v_try integer[];
        v_held numeric[];
        c integer;
      BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        IF coalesce(array_length(p_keys, 1), 0) > 0 THEN
          FOR c, fits, used IN
            SELECT m.call, m.fits, m.used
            FROM junction_consume_many(p_first, p_count, p_windows, p_nows, p_keys, p_amounts, p_limits) m
          LOOP
            call := c;
            amount := NULL;
            RETURN NEXT;
            IF NOT fits THEN
              v_ok[c] := false;
              v_refused := true;
            END IF;
          END LOOP;
        END IF;
        IF n = 0 THEN
          RETURN;
        END IF;
        IF NOT v_refused THEN
          v_held := junction_reserve_many(p_accounts, p_ids, p_uppers, p_expires, p_nows,
            p_hold_keys, p_key_limits, p_key_resets, p_key_starts);
          RETURN QUERY SELECT t.i::integer, NULL::boolean, NULL::bigint, t.h::text
            FROM unnest(v_held) WITH ORDINALITY AS t(h, i);
          RETURN;
        END IF;
        SELECT array_agg(i ORDER BY i) INTO v_try FROM generate_series(1, n) AS i WHERE v_ok[i];
        IF v_try IS NOT NULL THEN
          v_held := junction_reserve_many(
            (SELECT array_agg(p_accounts[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_ids[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_uppers[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_expires[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_nows[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_hold_keys[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_limits[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_resets[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)),
            (SELECT array_agg(p_key_starts[i] ORDER BY o) FROM unnest(v_try) WITH ORDINALITY AS t(i, o)));
          RETURN QUERY SELECT t.i, NULL::boolean, NULL::bigint, h::text
            FROM unnest(v_try, v_held) AS t(i, h);
        END IF;
      END
      $$;
    `,
  },
  {
    version: 20,
    // junction_settle_within_holds (migration 13) checked that every new charge is within its open hold
    // in one statement and dropped those holds in the next. One statement now does both: it deletes the
    // holds that are open and cover their charge, and a count short of the new records raises JU001 as
    // the check did (junction_settle_many then rolls the batch back and settles it item by item). Two
    // records of a batch naming one hold now go item by item too, where both were charged within it.
    name: 'settle check and hold release in one statement',
    sql: `
      CREATE OR REPLACE FUNCTION junction_settle_within_holds(p jsonb) RETURNS numeric[] LANGUAGE plpgsql VOLATILE AS $$
      DECLARE
        v_ids text[];
        v_accts text[];
        v_refs text[];
        v_costs numeric[];
        v_helds numeric[];
        v_nows bigint[];
        v_new text[];
        v_out numeric[];
        v_gone bigint;
      BEGIN
        SELECT array_agg(e->>'id' ORDER BY i), array_agg(e->>'a' ORDER BY i), array_agg(e->>'ref' ORDER BY i),
            array_agg((e->>'cost')::numeric ORDER BY i), array_agg((e->>'held')::numeric ORDER BY i),
            array_agg((e->>'now')::bigint ORDER BY i)
          INTO v_ids, v_accts, v_refs, v_costs, v_helds, v_nows
          FROM jsonb_array_elements(p) WITH ORDINALITY AS x(e, i);
        IF (SELECT count(DISTINCT d) FROM unnest(v_ids) AS d) < cardinality(v_ids) THEN
          RAISE EXCEPTION 'a generation id twice in one batch' USING ERRCODE = 'JU001';
        END IF;
        WITH ins AS (
          INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
              generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
              upstream_cost, discount_ppm, discount, cost, attempts, key_hash)
            SELECT e->>'id', e->>'a', e->>'api', e->>'model', e->>'provider', (e->>'createdAt')::bigint,
              (e->>'generationTimeMs')::bigint, (e->>'latencyMs')::bigint, (e->>'streamed')::boolean,
              e->>'finishReason', (e->>'cancelled')::boolean, e->>'costSource', e->'usage',
              (e->>'upstreamCost')::numeric, (e->>'discountPpm')::integer, (e->>'discount')::numeric,
              (e->>'cost')::numeric, CASE WHEN jsonb_typeof(e->'attempts') = 'array' THEN e->'attempts' END,
              e->>'key'
            FROM jsonb_array_elements(p) AS e
            ON CONFLICT (generation_id) DO NOTHING RETURNING generation_id)
        SELECT coalesce(array_agg(generation_id), '{}') INTO v_new FROM ins;
        PERFORM 1 FROM ledger WHERE account_id IN (
            SELECT s.a FROM unnest(v_ids, v_accts) AS s(id, a) WHERE s.id = ANY (v_new))
          ORDER BY account_id FOR NO KEY UPDATE;
        WITH gone AS (
          DELETE FROM reservations r USING unnest(v_ids, v_accts, v_refs, v_costs, v_helds, v_nows)
              AS s(id, a, ref, cost, held, now)
            WHERE s.id = ANY (v_new) AND r.account_id = s.a AND r.id = s.ref AND r.expires_at > s.now
              AND s.cost <= coalesce(s.held, r.amount)
            RETURNING 1)
        SELECT count(*) INTO v_gone FROM gone;
        IF v_gone < cardinality(v_new) THEN
          RAISE EXCEPTION 'a charge past its hold' USING ERRCODE = 'JU001';
        END IF;
        UPDATE ledger l SET usage = l.usage + c.amount
          FROM (SELECT s.a, sum(s.cost) AS amount FROM unnest(v_ids, v_accts, v_costs) AS s(id, a, cost)
                WHERE s.id = ANY (v_new) GROUP BY s.a) c
          WHERE l.account_id = c.a AND c.amount <> 0;
        SELECT array_agg(CASE WHEN s.id = ANY (v_new) THEN s.cost END ORDER BY s.i) INTO v_out
          FROM unnest(v_ids, v_costs) WITH ORDINALITY AS s(id, cost, i);
        RETURN v_out;
      END
      $$;
    `,
  },
]

/** pg_advisory_xact_lock key taken by the migration transaction (an arbitrary constant of Junction's). */
const MIGRATION_LOCK = '7310593858302427730'

/** Applies, in one transaction, the migrations the database has not had; their versions. */
export async function migrate(transaction: Transaction, log: Logger | undefined): Promise<number[]> {
  return transaction(async (q) => {
    // Two instances starting at once: the second waits here and then finds nothing left to apply.
    await q('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK])
    await q(`CREATE TABLE IF NOT EXISTS schema_version (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
    const { rows } = await q<{ v: number }>('SELECT coalesce(max(version), 0) AS v FROM schema_version')
    const current = rows[0]!.v
    const known = migrations.at(-1)?.version ?? 0
    if (current > known) {
      log?.warn({ current, known }, 'the database schema is newer than this gateway knows')
    }
    const pending = migrations.filter((m) => m.version > current)
    for (const m of pending) {
      await q(m.sql)
      await q('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [m.version, m.name])
    }
    return pending.map((m) => m.version)
  })
}

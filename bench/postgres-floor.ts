import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import pino from 'pino'
import { createPostgresStore } from '../src/store/postgres/index.ts'
import { settleJson } from '../src/store/postgres/ledger.ts'
import { windowStarts } from '../src/store/key-usage.ts'
import { BENCH_KEY_HASH, benchRecord, createBenchAccount } from './bench-account.ts'
import { createThrowawayDatabase } from './throwaway-database.ts'

// `npm run bench:postgres-floor`: what the database itself charges a request's hold and settle, without
// the gateway or the `pg` client in the way. pgbench (PostgreSQL's own load tool, on PATH) runs, one
// call at a time on a throwaway database with an account and a key:
//   1. the hold and the settle as the store sends them (junction_admit_one, junction_settle_durably);
//   2. the settle's work statement by statement, in one transaction, with a `SELECT 1` for the round
//      trip: each line is a round trip plus that statement (the simple protocol, so its planning too);
//   3. the settle as one transaction whose commit waits for the disk, and
//   4. the same not waiting for it (synchronous_commit off: what giving up a crash of the database
//      server would buy; not what the gateway does).
// Figures are pgbench's per-statement mean latencies (ms). Records figures, asserts nothing.
// Knobs: BENCH_PG_URL (the admin URL), BENCH_FLOOR_CALLS (transactions per script, 2000).

const calls = Number(process.env['BENCH_FLOOR_CALLS'] ?? 2000)
const run = promisify(execFile)

let version: string
try {
  version = (await run('pgbench', ['--version'])).stdout.trim()
} catch {
  console.error('pgbench is not on PATH (it comes with the PostgreSQL server or client packages)')
  process.exit(1)
}

const NOW = Date.now()
const EXPIRES = NOW + 600_000
const windows = windowStarts(NOW)

/** pgbench's generation id for each transaction, where the settle item names it. */
const ID = 'g-PGBENCH-ID'
const item = settleJson({
  ref: { accountId: 'bench', id: ID },
  record: { ...benchRecord(ID, 'bench', NOW, 26n), keyHash: BENCH_KEY_HASH },
  limit: { held: 1_000_000n, now: NOW },
})
/** A batch of that one settle as the store sends it (ledger.ts's settleJson), for generation `:id`. */
const settleJsonSql = `replace('${JSON.stringify([item]).replaceAll("'", "''")}', '${ID}', 'g-' || :id::text)::jsonb`

const newId = '\\set id random(1, 2000000000)'
const hold = `SELECT junction_admit_one('bench', 'g-' || :id::text, 1000000, ${EXPIRES}, ${NOW}, '${BENCH_KEY_HASH}', NULL, NULL, NULL);`

interface Script {
  title: string
  /** A label per SQL line, in order (pgbench reports one latency per line). */
  lines: [label: string, sql: string][]
}

const scripts: Script[] = [
  {
    title: 'a request as the store sends it',
    lines: [
      ['hold (junction_admit_one, its commit not waiting for the disk)', hold],
      ['settle (CALL junction_settle_durably)', `CALL junction_settle_durably(${settleJsonSql}, NULL);`],
    ],
  },
  {
    title: "the settle's work, statement by statement",
    lines: [
      ['hold', hold],
      ['BEGIN', 'BEGIN;'],
      ['SELECT 1 (a round trip)', 'SELECT 1;'],
      [
        'the generation record (its insert and five indexes)',
        `INSERT INTO generations (generation_id, account_id, api, model, provider, created_at,
          generation_time_ms, latency_ms, streamed, finish_reason, cancelled, cost_source, usage,
          upstream_cost, discount_ppm, discount, cost, attempts, key_hash)
          VALUES ('g-' || :id::text, 'bench', 'chat.completions', 'openai/gpt-4o-mini', 'openai', ${NOW}, 1, 1,
          false, 'stop', false, 'upstream', '{"prompt_tokens":8,"completion_tokens":9,"total_tokens":17}', 26,
          0, 0, 26, NULL, '${BENCH_KEY_HASH}') ON CONFLICT (generation_id) DO NOTHING RETURNING generation_id;`,
      ],
      ["the ledger row's lock", "SELECT 1 FROM ledger WHERE account_id = 'bench' FOR NO KEY UPDATE;"],
      [
        'the hold released (with its triggers: held totals)',
        `DELETE FROM reservations WHERE account_id = 'bench' AND id = 'g-' || :id::text AND expires_at > ${NOW}
          RETURNING 1;`,
      ],
      ["the account's usage", "UPDATE ledger SET usage = usage + 26 WHERE account_id = 'bench';"],
      [
        "the key's usage",
        `INSERT INTO key_usage AS u (key_hash, total, day_start, day, week_start, week, month_start, month)
          VALUES ('${BENCH_KEY_HASH}', 26, ${windows.day}, 26, ${windows.week}, 26, ${windows.month}, 26)
          ON CONFLICT (key_hash) DO UPDATE SET total = u.total + 26, day = u.day + 26, week = u.week + 26,
          month = u.month + 26;`,
      ],
      ['COMMIT (waiting for the disk)', 'COMMIT;'],
    ],
  },
  {
    title: 'the settle as one transaction, its commit waiting for the disk',
    lines: [
      ['hold', hold],
      ['settle', `SELECT junction_key_charge(${settleJsonSql}, junction_settle_many(${settleJsonSql}));`],
    ],
  },
  {
    title: 'the same, not waiting for the disk (not what the gateway does)',
    lines: [
      ['hold', hold],
      ['SET synchronous_commit = off (a round trip)', 'SET synchronous_commit = off;'],
      ['settle', `SELECT junction_key_charge(${settleJsonSql}, junction_settle_many(${settleJsonSql}));`],
    ],
  },
]

const database = await createThrowawayDatabase()
const dir = await mkdtemp(join(tmpdir(), 'junction-pg-floor-'))
try {
  const store = await createPostgresStore(database.url, { log: pino({ level: 'silent' }) })
  await createBenchAccount(store, true)
  await store.close()

  console.log(`PostgreSQL floor: ${version}, ${calls} transactions a script, one client, mean ms a statement`)
  for (const [i, script] of scripts.entries()) {
    const file = join(dir, `script-${i}.sql`)
    // One line per statement: pgbench reports a latency per line.
    const sql = script.lines.map(([, s]) => s.replace(/\s*\n\s*/g, ' '))
    await writeFile(file, `${[newId, ...sql].join('\n')}\n`)
    const { stdout } = await run('pgbench', [
      '-n',
      '-M',
      'simple',
      '-r',
      '-c',
      '1',
      '-t',
      String(calls),
      '-f',
      file,
      database.url,
    ])
    const latencies = statementLatencies(stdout)
    if (latencies.length !== script.lines.length)
      throw new Error(
        `pgbench reported ${latencies.length} statements, expected ${script.lines.length}:\n${stdout}`,
      )
    console.log(`\n${script.title}`)
    script.lines.forEach(([label], j) => console.log(`  ${latencies[j]!.toFixed(3).padStart(7)}  ${label}`))
  }
} finally {
  await rm(dir, { recursive: true, force: true })
  await database.drop()
}

/** pgbench -r's per-statement mean latencies (ms), the `\set` line left out. */
function statementLatencies(out: string): number[] {
  const at = out.indexOf('statement latencies')
  if (at < 0) throw new Error(`no statement latencies in pgbench's output:\n${out}`)
  return out
    .slice(at)
    .split('\n')
    .slice(1)
    .map((line) => /^\s+([\d.]+)\s+\d+\s+(.*)$/.exec(line))
    .filter((m): m is RegExpExecArray => m !== null && !m[2]!.startsWith('\\set'))
    .map((m) => Number(m[1]))
}

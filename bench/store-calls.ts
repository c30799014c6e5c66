import { readdir, readFile, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { admit, admitRequest, settle, createMeteringStats, normalizeUsage } from '../src/billing/metering.ts'
import { loadConfig } from '../src/config.ts'
import { createMemoryStore } from '../src/store/memory/index.ts'
import { createPostgresStore } from '../src/store/postgres/index.ts'
import { createSqliteStore, openSqliteStore } from '../src/store/sqlite/index.ts'
import type { Store } from '../src/store/types.ts'
import pino from 'pino'
import { createBenchAccount } from './bench-account.ts'
import { statCpuSeconds } from './proc-stat.ts'
import { createThrowawayDatabase } from './throwaway-database.ts'

// The store calls of one blocking chat request (admission before the body, admission with the hold,
// settlement), made by BENCH_CONCURRENCY (50) concurrent loops for BENCH_REQUESTS (20 000) requests,
// on each backend in turn, BENCH_ROUNDS (3) rounds: the process's CPU (every thread) and the event
// loop's busy time per request, without HTTP in the way. `engine` is the SQLite store on the event
// loop (as before the database thread), `sqlite` the shipped one, `postgres` a throwaway database of
// the local PostgreSQL (BENCH_PG_URL: its admin URL), for which the database server's CPU per request
// (its sessions' user + system time, from /proc: the database must be on this machine) and the
// statements sent per request are printed too.
// BENCH_RATE (requests/s): instead of the concurrent loops, one request's calls started at that fixed
// rate (open loop, as the gateway's load arrives), and the p50 / p99 of a request's store calls,
// counted from when it was due. The batches of a group commit are then as large as the rate makes them,
// not as the concurrency does. BENCH_KEY=1: every request is made with an API key (as the gateway's
// are): the hold and the record name it and the settlement charges it. BENCH_PRE=0: no admission before
// the body. BENCH_LIMITS=1: the account has (unreachable) rate limits, so the windows are counted.
// Each line also splits the process's CPU by kind of thread (/proc/self/task, Linux): the event loop
// (MainThread), the database and checkpoint threads (WorkerThread), V8's helpers (V8Worker).
//   node bench/store-calls.ts [memory|engine|sqlite|postgres ...]

const total = Number(process.env['BENCH_REQUESTS'] ?? 20_000)
const concurrency = Number(process.env['BENCH_CONCURRENCY'] ?? 50)
const rounds = Number(process.env['BENCH_ROUNDS'] ?? 3)
const which = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['memory', 'engine', 'sqlite']
const limits = process.env['BENCH_LIMITS'] === '1'
const pre = process.env['BENCH_PRE'] !== '0'
const rate = Number(process.env['BENCH_RATE'] ?? 0)
const withKey = process.env['BENCH_KEY'] === '1'

const config = loadConfig({ NODE_ENV: 'development' })
if (limits) config.limits.defaultRateLimits = { requestsPerMinute: 1e9, tokensPerMinute: 1e12 }
const log = pino({ level: 'silent' })

interface RunResult {
  cpuUs: number
  loopUs: number
  wallMs: number
  /** With BENCH_RATE: a request's store calls, from when it was due (ms). */
  p50Ms?: number
  p99Ms?: number
}

async function run(store: Store): Promise<RunResult> {
  const { account, key } = await createBenchAccount(store, withKey)
  const deps = { store, config, log, stats: createMeteringStats() }
  let next = 0
  const one = async (i: number): Promise<void> => {
    const now = Date.now()
    // BENCH_PRE=0: no admission before the body (a body received whole with its headers).
    if (pre) await admitRequest(deps, account, now)
    const a = await admit(deps, {
      account,
      slug: 'openai/gpt-4o-mini',
      generationId: `gen-${i}-${now}`,
      ...(key ? { key } : {}),
      costBound: 1_000_000n,
      tokenEstimate: 100,
      ttlMs: 60_000,
      now,
      requestCounted: pre,
    })
    const usage = normalizeUsage({ prompt_tokens: 8, completion_tokens: 9 })
    const record = {
      generationId: `gen-${i}-${now}`,
      accountId: account.id,
      api: 'chat.completions',
      model: 'openai/gpt-4o-mini',
      provider: 'openai',
      createdAt: now,
      generationTimeMs: 1,
      latencyMs: 1,
      streamed: false,
      finishReason: 'stop',
      cancelled: false,
      costSource: 'upstream' as const,
      usage,
      upstreamCost: 26n,
      discountPpm: 0,
      discount: 0n,
      cost: 26n,
      ...(key ? { keyHash: key.hash } : {}),
    }
    await settle(deps, {
      reservation: a.reservation,
      record,
      held: a.reservation.amount,
      tokenEstimate: a.tokenEstimate,
      now,
    })
  }
  const loop = async (): Promise<void> => {
    while (next < total) await one(next++)
  }
  // Request i is due at t0 + i / rate; it is started when due (the clock is read every millisecond).
  const latencies: number[] = []
  const openLoop = async (t0: number): Promise<void> => {
    const started: Promise<void>[] = []
    while (started.length < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) * rate) / 1000) + 1)
      while (started.length < due) {
        const dueAt = t0 + (started.length * 1000) / rate
        started.push(one(started.length).then(() => void latencies.push(performance.now() - dueAt)))
      }
      await sleep(1)
    }
    await Promise.all(started)
  }
  const elu0 = performance.eventLoopUtilization()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  if (rate > 0) await openLoop(t0)
  else await Promise.all(Array.from({ length: concurrency }, loop))
  const wallMs = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const elu = performance.eventLoopUtilization(elu0)
  latencies.sort((a, b) => a - b)
  return {
    cpuUs: (cpu.user + cpu.system) / total,
    loopUs: (elu.active * 1000) / total,
    wallMs,
    ...(rate > 0
      ? {
          p50Ms: latencies[Math.floor(latencies.length * 0.5)],
          p99Ms: latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))],
        }
      : {}),
  }
}

/** A /proc `stat` line's user + system CPU in µs. */
const statCpuUs = (stat: string): number => statCpuSeconds(stat) * 1_000_000

/** The CPU (user + system, µs) the database's server processes for `url` have used so far. */
async function serverCpuUs(url: string): Promise<Map<number, number>> {
  const c = new pg.Client(url)
  await c.connect()
  const { rows } = await c.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
  )
  await c.end()
  const ticks = new Map<number, number>()
  for (const { pid } of rows) {
    try {
      ticks.set(pid, statCpuUs(await readFile(`/proc/${pid}/stat`, 'utf8')))
    } catch {
      // Gone, or not on this machine.
    }
  }
  return ticks
}

/** This process's CPU so far (µs) by thread name, from /proc/self/task (empty elsewhere than Linux). */
async function threadCpuUs(): Promise<Map<string, number>> {
  const byName = new Map<string, number>()
  const tasks = await readdir('/proc/self/task').catch(() => [] as string[])
  for (const task of tasks) {
    try {
      const stat = await readFile(`/proc/self/task/${task}/stat`, 'utf8')
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
      byName.set(name, (byName.get(name) ?? 0) + statCpuUs(stat))
    } catch {
      // A thread that ended meanwhile.
    }
  }
  return byName
}

/** The CPU the sessions alive at both readings used between them (µs). */
const cpuBetween = (before: Map<number, number>, after: Map<number, number>): number =>
  [...after].reduce((sum, [pid, us]) => sum + (before.has(pid) ? us - before.get(pid)! : 0), 0)

/** Messages to the database thread (batches of calls) in the current run. */
let batches = 0
/** Statements sent to PostgreSQL in the current run. */
let statements = 0

const dir = await mkdtemp(join(tmpdir(), 'junction-calls-'))
const drops: (() => Promise<void>)[] = []
try {
  const results = new Map<string, RunResult[]>()
  for (let r = 0; r < rounds; r++) {
    for (const name of which) {
      const path = join(dir, `${name}-${r}.db`)
      const database = name === 'postgres' ? await createThrowawayDatabase() : undefined
      if (database) drops.push(database.drop)
      const store = database
        ? await createPostgresStore(database.url, { onRoundTrip: () => statements++ })
        : name === 'memory'
          ? createMemoryStore()
          : name === 'engine'
            ? openSqliteStore(path)
            : createSqliteStore(path, { checkpointIntervalMs: 250, onBatch: () => batches++ })
      batches = 0
      statements = 0
      const server0 = database ? await serverCpuUs(database.url) : undefined
      const threads0 = await threadCpuUs()
      const res = await run(store)
      const threads = [...(await threadCpuUs())]
        .map(([name, us]) => [name, (us - (threads0.get(name) ?? 0)) / total] as const)
        .filter(([, us]) => us >= 1)
      const serverUs = database ? cpuBetween(server0!, await serverCpuUs(database.url)) / total : undefined
      await store.close()
      results.set(name, [...(results.get(name) ?? []), res])
      console.log(
        `round ${r + 1} ${name.padEnd(8)} CPU ${res.cpuUs.toFixed(1)} µs/req  event loop ${res.loopUs.toFixed(1)} µs/req  ${((total / res.wallMs) * 1000).toFixed(0)} req/s` +
          (res.p50Ms !== undefined
            ? `  p50 ${res.p50Ms.toFixed(2)} ms  p99 ${res.p99Ms!.toFixed(2)} ms`
            : '') +
          (name === 'sqlite' ? `  ${(batches / total).toFixed(2)} messages/req` : '') +
          (serverUs !== undefined
            ? `  database server CPU ${serverUs.toFixed(1)} µs/req  ${(statements / total).toFixed(2)} statements/req`
            : ''),
      )
      if (threads.length > 0)
        console.log(
          `        threads (µs/req): ${threads.map(([n, us]) => `${n} ${us.toFixed(0)}`).join(', ')}`,
        )
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  for (const [name, rs] of results)
    console.log(
      `median ${name.padEnd(8)} CPU ${med(rs.map((r) => r.cpuUs)).toFixed(1)} µs/req  event loop ${med(rs.map((r) => r.loopUs)).toFixed(1)} µs/req`,
    )
} finally {
  await rm(dir, { recursive: true, force: true })
  for (const drop of drops)
    await drop().catch((err: unknown) => console.error('could not drop a database:', err))
}

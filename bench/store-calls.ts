import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { admit, admitRequest, settle, createMeteringStats, normalizeUsage } from '../src/billing/metering.ts'
import { loadConfig } from '../src/config.ts'
import { createMemoryStore } from '../src/store/memory/index.ts'
import { createSqliteStore, openSqliteStore } from '../src/store/sqlite/index.ts'
import type { Store } from '../src/store/types.ts'
import pino from 'pino'

// The store calls of one blocking chat request (admission before the body, admission with the hold,
// settlement), made by BENCH_CONCURRENCY (50) concurrent loops for BENCH_REQUESTS (20 000) requests,
// on each backend in turn, BENCH_ROUNDS (3) rounds: the process's CPU (every thread) and the event
// loop's busy time per request, without HTTP in the way. `engine` is the SQLite store on the event
// loop (as before the database thread), `sqlite` the shipped one.
//   node bench/store-calls.ts [memory|engine|sqlite ...]

const total = Number(process.env['BENCH_REQUESTS'] ?? 20_000)
const concurrency = Number(process.env['BENCH_CONCURRENCY'] ?? 50)
const rounds = Number(process.env['BENCH_ROUNDS'] ?? 3)
const which = process.argv.slice(2).length > 0 ? process.argv.slice(2) : ['memory', 'engine', 'sqlite']
const limits = process.env['BENCH_LIMITS'] === '1'
const pre = process.env['BENCH_PRE'] !== '0'

const config = loadConfig({ NODE_ENV: 'development' })
if (limits) config.limits.defaultRateLimits = { requestsPerMinute: 1e9, tokensPerMinute: 1e12 }
const log = pino({ level: 'silent' })

async function run(store: Store): Promise<{ cpuUs: number; loopUs: number; wallMs: number }> {
  const account = {
    id: 'bench',
    name: 'bench',
    createdAt: 0,
    discountPpm: 0,
    modelDiscountsPpm: {},
    rateLimits: {},
  }
  await store.accounts.create(account, 10n ** 24n)
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
  const elu0 = performance.eventLoopUtilization()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await Promise.all(Array.from({ length: concurrency }, loop))
  const wallMs = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  const elu = performance.eventLoopUtilization(elu0)
  return {
    cpuUs: (cpu.user + cpu.system) / total,
    loopUs: (elu.active * 1000) / total,
    wallMs,
  }
}

/** Messages to the database thread (batches of calls) in the current run. */
let batches = 0

const dir = await mkdtemp(join(tmpdir(), 'junction-calls-'))
try {
  const results = new Map<string, { cpuUs: number; loopUs: number; wallMs: number }[]>()
  for (let r = 0; r < rounds; r++) {
    for (const name of which) {
      const path = join(dir, `${name}-${r}.db`)
      const store =
        name === 'memory'
          ? createMemoryStore()
          : name === 'engine'
            ? openSqliteStore(path)
            : createSqliteStore(path, { checkpointIntervalMs: 250, onBatch: () => batches++ })
      batches = 0
      const res = await run(store)
      await store.close()
      results.set(name, [...(results.get(name) ?? []), res])
      console.log(
        `round ${r + 1} ${name.padEnd(7)} CPU ${res.cpuUs.toFixed(1)} µs/req  event loop ${res.loopUs.toFixed(1)} µs/req  ${((total / res.wallMs) * 1000).toFixed(0)} req/s` +
          (name === 'sqlite' ? `  ${(batches / total).toFixed(2)} messages/req` : ''),
      )
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!
  for (const [name, rs] of results)
    console.log(
      `median ${name.padEnd(7)} CPU ${med(rs.map((r) => r.cpuUs)).toFixed(1)} µs/req  event loop ${med(rs.map((r) => r.loopUs)).toFixed(1)} µs/req`,
    )
} finally {
  await rm(dir, { recursive: true, force: true })
}

import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { accessSync, constants as fsConstants } from 'node:fs'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { availableParallelism, tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { performance } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import pg from 'pg'
import { Agent, Client, Pool, request, type Dispatcher } from 'undici'
import { freePort } from './free-port.ts'
import { createThrowawayDatabase, PG_ADMIN_URL } from './throwaway-database.ts'
import { cpuSeconds } from './proc-stat.ts'

// `npm run bench`: the gateway (state in memory; again on a SQLite file, `gw sqlite`, and on a throwaway
// database of the local PostgreSQL, `gw postgres`; BENCH_PG_URL is its admin URL) against a
// bare Fastify + undici pass-through (the floor) and against the fake upstream itself, each in its own
// process. It records figures and asserts nothing. Knobs: BENCH_DURATION (s, default 10),
// BENCH_CONNECTIONS (50), BENCH_RATE (req/s, 1000), BENCH_STREAMS (sequential streams for time to
// first byte, 200), BENCH_OPEN_STREAMS (1000), BENCH_PROMPT_STREAMS and BENCH_PROMPT_KB (200 streams of a 64
// KB prompt, after those), BENCH_ROUNDS (3: the load measures, saturation, fixed rate and time to first byte,
// run in rounds, each target in another order each round, and each figure is its rounds' median),
// BENCH_LOG_LEVEL (the gateways' log level, info as shipped).
// With two cores and taskset, as the issues' own figures were taken: each measured process (a gateway,
// the bare proxy) is pinned to core 0, and the load generators (wrk, this process) and the fake upstream
// to core 1; the local PostgreSQL is left to the scheduler. `gw postgres ×2` is two gateway processes
// on one database, each pinned to its own core, loaded together (the connections split between them,
// wrk not pinned); BENCH_PIN=0 pins nothing. For both PostgreSQL
// columns the database's own figures are read too: statements a request sends (the gateways'
// junction_store_statements_total), the database's CPU per request and the sessions waiting for a lock.
// BENCH_SOAK (seconds; `npm run bench:soak` sets 600) runs only the soak instead: the shipped defaults
// (SQLite, info) at BENCH_SOAK_RATE (req/s, 500) for that long, one request in ten streamed, RSS
// sampled throughout.
// Every gateway (and the bare proxy) is measured on its second start, as `npm start` runs from then on: a
// first start of the same configuration fills Node's compile cache (the scratch directory's,
// NODE_COMPILE_CACHE), then stops.

const root = fileURLToPath(new URL('..', import.meta.url))
const CHAT_PATH = '/v1/chat/completions'
const HOLD_MARKER = 'x-bench-hold'
const settings = {
  durationS: positiveInt('BENCH_DURATION', 10),
  connections: positiveInt('BENCH_CONNECTIONS', 50),
  rate: positiveInt('BENCH_RATE', 1000),
  streams: positiveInt('BENCH_STREAMS', 200),
  openStreams: positiveInt('BENCH_OPEN_STREAMS', 1000),
  promptStreams: positiveInt('BENCH_PROMPT_STREAMS', 200),
  promptKb: positiveInt('BENCH_PROMPT_KB', 64),
  rounds: positiveInt('BENCH_ROUNDS', 3),
  // Each target's first warm-up: from a cold start the gateway reaches its steady requests/s only after
  // ≈10 s at saturation (its code is compiled as it runs), the bare proxy after ≈4 s; measured from 2 s,
  // the first round counted the compiler's work as the request path's. Later rounds warm up for 2 s.
  firstWarmupS: positiveInt('BENCH_WARMUP', 10),
  warmupS: 2,
  streamWarmup: 20,
  soakS: process.env['BENCH_SOAK'] ? positiveInt('BENCH_SOAK', 600) : 0,
  soakRate: positiveInt('BENCH_SOAK_RATE', 500),
}

const headers = { authorization: 'Bearer sk-dev', 'content-type': 'application/json' }
const messages = [{ role: 'user', content: 'hello' }]
const blockingBody = JSON.stringify({ model: 'openai/gpt-4o-mini', messages })
const streamBody = JSON.stringify({ model: 'openai/gpt-4o-mini', messages, stream: true })
// The gateway forwards request bodies, not client headers: the hold marker travels in both.
const holdBody = JSON.stringify({
  model: 'openai/gpt-4o-mini',
  messages: [{ role: 'user', content: HOLD_MARKER }],
  stream: true,
})

// The held streams of a client with a long prompt (a coding agent's are 50-200 KB): what a stream costs
// beyond its connection grows with what is kept of its request.
const promptHoldBody = JSON.stringify({
  model: 'openai/gpt-4o-mini',
  messages: [
    {
      role: 'system',
      content: 'You are a careful assistant. '.repeat(Math.ceil((settings.promptKb * 1024) / 29)),
    },
    { role: 'user', content: HOLD_MARKER },
  ],
  stream: true,
})

function positiveInt(name: string, fallback: number): number {
  const raw = process.env[name]
  const value = raw === undefined || raw === '' ? fallback : Number(raw)
  if (!Number.isInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer`)
  return value
}

// ---------------------------------------------------------------------------------------------
// Child processes

interface Child {
  name: string
  proc: ChildProcess
  /** The last few KB of the child's output, shown when it dies. */
  tail: string
  /** Stopped on purpose before the end (the start that fills the compile cache). */
  retired?: boolean
}

type TargetName =
  'gateway' | 'gateway-sqlite' | 'gateway-postgres' | 'gateway-postgres-2' | 'floor' | 'upstream'

interface Target {
  name: TargetName
  origin: string
  child: Child
  /** More instances of the same target, loaded together with it (`gw postgres ×2`). */
  peers?: Target[]
  /** The database a PostgreSQL target keeps its state in (its figures are read from it). */
  database?: string
}

/** The target and its peers. */
const instancesOf = (t: Target): Target[] => [t, ...(t.peers ?? [])]
const BENCH_ADMIN_KEY = 'bench-admin-key-not-a-secret'

const children: Child[] = []
/** Load generator processes (wrk) running right now. */
const tools = new Set<ChildProcess>()
let stopping: Promise<void> | undefined
let workDir: string | undefined

function exited(child: Child): boolean {
  return child.proc.exitCode !== null || child.proc.signalCode !== null
}

/** `probe`: loads bench/probe.ts into the child, which then reports its event-loop delay (see there). */
function startChild(name: string, script: string, env: Record<string, string>, probe = false): Child {
  const args = ['--disable-warning=ExperimentalWarning', ...(probe ? ['--import', './bench/probe.ts'] : [])]
  const proc = spawn(process.execPath, [...args, script], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe', ...(probe ? (['ipc'] as const) : [])],
  })
  const child: Child = { name, proc, tail: '' }
  const keep = (b: Buffer): void => {
    child.tail = (child.tail + b.toString('utf8')).slice(-4000)
  }
  proc.stdout?.on('data', keep)
  proc.stderr?.on('data', keep)
  proc.once('exit', (code, signal) => {
    if (!stopping && !child.retired && signal !== 'SIGINT')
      console.error(`${name} exited early (${signal ?? code}); its last output:\n${child.tail}`)
  })
  children.push(child)
  return child
}

async function stopChild(child: Child): Promise<void> {
  if (exited(child)) return
  const gone = once(child.proc, 'exit')
  child.proc.kill('SIGTERM')
  const force = setTimeout(() => child.proc.kill('SIGKILL'), 3_000)
  await gone
  clearTimeout(force)
}

/** Stops every child and removes the scratch directory; safe to call more than once. */
function cleanUp(): Promise<void> {
  for (const tool of tools) tool.kill('SIGKILL')
  stopping ??= Promise.all(children.map(stopChild)).then(async () => {
    if (workDir !== undefined) await rm(workDir, { recursive: true, force: true })
    await dropDatabase().catch((err: unknown) => console.error('could not drop the bench database:', err))
  })
  return stopping
}

const dropDatabases: (() => Promise<void>)[] = []
const dropDatabase = (): Promise<void> => Promise.all(dropDatabases.map((d) => d())).then(() => {})

/** A fresh database on the local PostgreSQL for the `gw postgres` column; dropped by cleanUp. */
async function createBenchDatabase(): Promise<string> {
  const database = await createThrowawayDatabase()
  dropDatabases.push(database.drop)
  return database.url
}

/** Polls until `url` answers (with 200 when `wantOk`), failing fast if the child dies. */
async function waitForHttp(child: Child, url: string, wantOk: boolean): Promise<void> {
  const deadline = Date.now() + 30_000
  while (Date.now() < deadline) {
    if (exited(child)) throw new Error(`${child.name} exited before it was ready`)
    try {
      const res = await request(url)
      await res.body.dump()
      if (!wantOk || res.statusCode === 200) return
    } catch {
      // Not listening yet.
    }
    await sleep(100)
  }
  throw new Error(`${child.name} did not answer ${url} within 30 s`)
}

async function startUpstream(): Promise<Target> {
  const port = await freePort()
  const child = startChild('upstream', 'bench/fake-upstream.ts', { PORT: String(port) })
  const origin = `http://127.0.0.1:${port}`
  await waitForHttp(child, `${origin}/`, false)
  await pin(child, LOAD_CPU)
  return { name: 'upstream', origin, child }
}

/** What has been started once already, filling the compile cache with its modules. */
const cacheFilledFor = new Set<string>()

/**
 * `start()`'s process on its second start, as `npm start` runs from then on: the first, once per `key`,
 * fills Node's compile cache (every thread's modules, src/start.mjs), then stops; `reset` then undoes
 * what it left (a SQLite file), so that the second starts as the first did.
 */
async function onSecondStart(
  key: string,
  start: () => Promise<Target>,
  reset?: () => Promise<void>,
): Promise<Target> {
  if (!cacheFilledFor.has(key)) {
    const first = await start()
    first.child.retired = true
    await stopChild(first.child)
    children.splice(children.indexOf(first.child), 1)
    await reset?.()
    cacheFilledFor.add(key)
  }
  return start()
}

/** Node's compile cache of every process the bench starts: the scratch directory's. */
const compileCacheDir = (dir: string): string => join(dir, 'compile-cache')

/**
 * `gateway` keeps its state in memory, `gateway-sqlite` in a SQLite file of the scratch directory,
 * `gateway-postgres` in a throwaway database on the local PostgreSQL (BENCH_PG_URL: its admin URL).
 * Measured on its second start (onSecondStart), once per store.
 */
function startGateway(
  name: 'gateway' | 'gateway-sqlite' | 'gateway-postgres' | 'gateway-postgres-2',
  upstream: string,
  configPath: string,
  dir: string,
  databaseUrl?: string,
  cpu?: number,
): Promise<Target> {
  return onSecondStart(
    databaseUrl ? 'postgres' : name,
    () => startGatewayOnce(name, upstream, configPath, dir, databaseUrl, cpu),
    async () => {
      for (const suffix of ['', '-wal', '-shm']) await rm(join(dir, `junction.db${suffix}`), { force: true })
    },
  )
}

async function startGatewayOnce(
  name: 'gateway' | 'gateway-sqlite' | 'gateway-postgres' | 'gateway-postgres-2',
  upstream: string,
  configPath: string,
  dir: string,
  databaseUrl?: string,
  cpu?: number,
): Promise<Target> {
  const port = await freePort()
  const child = startChild(
    name,
    'src/start.mjs',
    {
      // Set for the process rather than left to src/start.mjs (./data/compile-cache by default), so
      // that it is the scratch directory's, and covers bench/probe.ts, loaded before the entry point.
      NODE_COMPILE_CACHE: compileCacheDir(dir),
      GATEWAY_ADMIN_KEY: BENCH_ADMIN_KEY,
      GATEWAY_FILES_DIR: join(dir, `${name}-files`),
      GATEWAY_DATABASE_URL:
        databaseUrl ?? (name === 'gateway' ? 'memory' : `sqlite:${join(dir, 'junction.db')}`),
      PORT: String(port),
      HOST: '127.0.0.1',
      // The shipped default (info: one line per request); BENCH_LOG_LEVEL compares another.
      LOG_LEVEL: process.env['BENCH_LOG_LEVEL'] ?? 'info',
      OPENAI_API_KEY: 'sk-bench-not-a-real-key',
      OPENAI_BASE_URL: `${upstream}/v1`,
      NODE_ENV: 'development',
      GATEWAY_CONFIG: configPath,
    },
    true,
  )
  const origin = `http://127.0.0.1:${port}`
  await waitForHttp(child, `${origin}/healthz`, true)
  await pin(child, cpu)
  return { name, origin, child, ...(databaseUrl ? { database: new URL(databaseUrl).pathname.slice(1) } : {}) }
}

const tasksetPath = findOnPath('taskset')
/** The machine's cores, read before this process pins itself to one. */
const cores = availableParallelism()
/** Processes pinned to cores when the machine has two and taskset is there (and BENCH_PIN is not 0). */
const pinCores = cores >= 2 && tasksetPath !== undefined && process.env['BENCH_PIN'] !== '0'
/** The core of a measured process (a single gateway, the bare proxy), and the load's. */
const MEASURED_CPU = pinCores ? 0 : undefined
const LOAD_CPU = pinCores ? 1 : undefined
/** Every core: what the children of this process (pinned to LOAD_CPU) are given back when unpinned. */
const ALL_CPUS = `0-${cores - 1}`

/** Every thread of the process on core `cpu` (nothing when undefined). */
async function pin(child: Child | number, cpu: number | undefined): Promise<void> {
  if (cpu === undefined || !tasksetPath) return
  const pid = typeof child === 'number' ? child : child.proc.pid
  await promisify(execFile)(tasksetPath, ['-a', '-p', '-c', String(cpu), String(pid)])
}

/** The bare proxy, measured on its second start as the gateways are (its idle RSS is their baseline). */
function startFloor(upstream: string, dir: string): Promise<Target> {
  return onSecondStart('floor', async () => {
    const port = await freePort()
    const child = startChild(
      'floor',
      'bench/floor-proxy.ts',
      { PORT: String(port), UPSTREAM_ORIGIN: upstream, NODE_COMPILE_CACHE: compileCacheDir(dir) },
      true,
    )
    const origin = `http://127.0.0.1:${port}`
    await waitForHttp(child, `${origin}/`, false)
    await pin(child, MEASURED_CPU)
    return { name: 'floor', origin, child }
  })
}

/**
 * The gateway's only non-default setting: its upstream pool (256 connections by default) must hold
 * the 1000 streams of the memory measurement, or the streams past 256 would wait for a connection.
 */
async function writeGatewayConfig(dir: string): Promise<string> {
  const path = join(dir, 'gateway.json')
  const config = {
    providers: { openai: { kind: 'openai-compat', maxConnections: settings.openStreams + 100 } },
  }
  await writeFile(path, JSON.stringify(config))
  return path
}

// ---------------------------------------------------------------------------------------------
// Sanity: every target must answer correctly, or the figures would measure error responses.

async function checkTarget(target: Target): Promise<void> {
  const url = `${target.origin}${CHAT_PATH}`
  const blocking = await request(url, { method: 'POST', headers, body: blockingBody })
  const completion = (await blocking.body.json()) as { object?: string }
  if (blocking.statusCode !== 200 || completion.object !== 'chat.completion') {
    throw new Error(
      `${target.name}: blocking chat answered ${blocking.statusCode} ${JSON.stringify(completion)}`,
    )
  }
  const streamed = await request(url, { method: 'POST', headers, body: streamBody })
  const text = await streamed.body.text()
  const events = text.split('\n\n').filter((e) => e.startsWith('data: ')).length
  if (streamed.statusCode !== 200 || events !== 101 || !text.endsWith('data: [DONE]\n\n')) {
    throw new Error(`${target.name}: stream answered ${streamed.statusCode} with ${events} events`)
  }
}

// ---------------------------------------------------------------------------------------------
// Statistics

function percentile(sorted: number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] as number
}

function sortedCopy(values: number[]): number[] {
  return [...values].sort((a, b) => a - b)
}

// ---------------------------------------------------------------------------------------------
// (a) Blocking chat at saturation: wrk when installed, autocannon otherwise.

interface Saturation {
  rps: number
  p50Ms: number
  p99Ms: number
  failures: number
}

function findOnPath(command: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir, command)
    try {
      accessSync(candidate, fsConstants.X_OK)
      return candidate
    } catch {
      // Not in this directory.
    }
  }
  return undefined
}

const wrkPath = findOnPath('wrk')

async function writeWrkScript(dir: string): Promise<string> {
  const path = join(dir, 'chat.lua')
  const lines = [
    'wrk.method = "POST"',
    ...Object.entries(headers).map(([k, v]) => `wrk.headers["${k}"] = "${v}"`),
    `wrk.body = '${blockingBody}'`,
  ]
  await writeFile(path, `${lines.join('\n')}\n`)
  return path
}

/** wrk prints durations as 812.00us, 1.25ms, 1.02s or 1.50m. */
function wrkMs(text: string | undefined): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(text ?? '')
  if (!m) return Number.NaN
  const factor = { us: 0.001, ms: 1, s: 1_000, m: 60_000 }[m[2] as 'us' | 'ms' | 's' | 'm']
  return Number(m[1]) * factor
}

function parseWrk(output: string): Saturation {
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output)
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(output)
  return {
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(output)?.[1]),
    p50Ms: wrkMs(/^\s+50%\s+(\S+)/m.exec(output)?.[1]),
    p99Ms: wrkMs(/^\s+99%\s+(\S+)/m.exec(output)?.[1]),
    failures:
      Number(non2xx?.[1] ?? 0) +
      (socketErrors ? socketErrors.slice(1).reduce((s, n) => s + Number(n), 0) : 0),
  }
}

async function runWrk(
  wrk: string,
  target: Target,
  durationS: number,
  script: string,
  cpus: string | undefined,
): Promise<Saturation> {
  const args = ['-t1', `-c${settings.connections}`, `-d${durationS}s`, '--latency', '-s', script]
  const url = `${target.origin}${CHAT_PATH}`
  const run =
    cpus !== undefined && tasksetPath
      ? promisify(execFile)(tasksetPath, ['-c', cpus, wrk, ...args, url])
      : promisify(execFile)(wrk, [...args, url])
  tools.add(run.child)
  try {
    return parseWrk((await run).stdout)
  } finally {
    tools.delete(run.child)
  }
}

interface AutocannonResult {
  requests: { average: number }
  latency: { p50: number; p99: number }
  non2xx: number
  errors: number
}
type Autocannon = (options: Record<string, unknown>) => Promise<AutocannonResult>

/** Fallback without wrk. autocannon's latency histogram has 1 ms resolution. */
async function runAutocannon(target: Target, durationS: number): Promise<Saturation> {
  const autocannon = createRequire(import.meta.url)('autocannon') as Autocannon
  const result = await autocannon({
    url: `${target.origin}${CHAT_PATH}`,
    method: 'POST',
    headers,
    body: blockingBody,
    connections: settings.connections,
    duration: durationS,
  })
  return {
    rps: result.requests.average,
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    failures: result.non2xx + result.errors,
  }
}

/** `cpus`: wrk's cores, for taskset (autocannon runs in this process, on the load's core already). */
function saturateOne(
  target: Target,
  durationS: number,
  wrkScript: string,
  cpus: string | undefined,
): Promise<Saturation> {
  return wrkPath ? runWrk(wrkPath, target, durationS, wrkScript, cpus) : runAutocannon(target, durationS)
}

/**
 * A target with peers is loaded on every instance at once, the connections split between them: the
 * requests/s add up, the latencies are the worst instance's.
 */
async function saturate(target: Target, durationS: number, wrkScript: string): Promise<Saturation> {
  const all = instancesOf(target)
  if (all.length === 1) return saturateOne(target, durationS, wrkScript, LOAD_CPU?.toString())
  const connections = settings.connections
  settings.connections = Math.max(1, Math.round(connections / all.length))
  try {
    const cpus = pinCores ? ALL_CPUS : undefined
    const each = await Promise.all(all.map((t) => saturateOne(t, durationS, wrkScript, cpus)))
    return {
      rps: each.reduce((n, e) => n + e.rps, 0),
      p50Ms: Math.max(...each.map((e) => e.p50Ms)),
      p99Ms: Math.max(...each.map((e) => e.p99Ms)),
      failures: each.reduce((n, e) => n + e.failures, 0),
    }
  } finally {
    settings.connections = connections
  }
}

/**
 * Saturation plus the target's own CPU time per request: on a shared machine the load generator
 * and the upstream take cores too, and CPU per request is the figure that does not move with them.
 */
async function saturateWithCpu(
  target: Target,
  durationS: number,
  wrkScript: string,
): Promise<Saturation & { cpuUsPerRequest: number }> {
  const pids = instancesOf(target).map(targetPid)
  const cpuOf = async () => (await Promise.all(pids.map(cpuSeconds))).reduce((a, b) => a + b, 0)
  const cpuBefore = await cpuOf()
  const s = await saturate(target, durationS, wrkScript)
  const cpu = (await cpuOf()) - cpuBefore
  return { ...s, cpuUsPerRequest: (cpu * 1e6) / (s.rps * durationS) }
}

// ---------------------------------------------------------------------------------------------
// (b) Blocking chat at a constant rate, wrk2-style: request i is due at start + i/rate, and its
// latency is counted from when it was due, so a stall is not hidden by requests not yet sent.
// (autocannon's overallRate sends each connection's quota in a burst at the top of every second.)

interface FixedRate {
  p50Ms: number
  p99Ms: number
  completedRps: number
  failures: number
}

async function timedBlockingRequest(pool: Pool, due: number, latencies: number[]): Promise<boolean> {
  try {
    const res = await pool.request({ method: 'POST', path: CHAT_PATH, headers, body: blockingBody })
    await res.body.text()
    if (res.statusCode !== 200) return false
    latencies.push(performance.now() - due)
    return true
  } catch {
    return false
  }
}

async function constantRate(target: Target, rate: number, durationS: number): Promise<FixedRate> {
  // Requests go round the instances of a target with peers.
  const instances = instancesOf(target)
  const pools = instances.map(
    (t) =>
      new Pool(t.origin, {
        connections: Math.max(1, Math.round(settings.connections / instances.length)),
        keepAliveTimeout: 30_000,
      }),
  )
  const total = rate * durationS
  const latencies: number[] = []
  const pending: Promise<boolean>[] = []
  const start = performance.now()
  while (pending.length < total) {
    const dueCount = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000) + 1)
    while (pending.length < dueCount) {
      const due = start + (pending.length * 1000) / rate
      pending.push(timedBlockingRequest(pools[pending.length % pools.length]!, due, latencies))
    }
    await sleep(1)
  }
  const outcomes = await Promise.all(pending)
  const elapsedS = (performance.now() - start) / 1000
  await Promise.all(pools.map((p) => p.close()))
  const sorted = sortedCopy(latencies)
  return {
    p50Ms: percentile(sorted, 0.5),
    p99Ms: percentile(sorted, 0.99),
    completedRps: latencies.length / elapsedS,
    failures: outcomes.filter((ok) => !ok).length,
  }
}

// ---------------------------------------------------------------------------------------------
// (c) Time to first byte of a 100-chunk stream, sequential requests on one keep-alive connection.

interface Ttfb {
  medianMs: number
  p99Ms: number
  /** Median time to the last byte: shows whether the first byte was held back until the end. */
  lastMedianMs: number
}

async function timeStream(client: Client): Promise<{ firstMs: number; lastMs: number }> {
  const start = performance.now()
  const res = await client.request({ method: 'POST', path: CHAT_PATH, headers, body: streamBody })
  let first = 0
  for await (const _chunk of res.body) if (first === 0) first = performance.now()
  if (res.statusCode !== 200) throw new Error(`stream answered ${res.statusCode}`)
  return { firstMs: first - start, lastMs: performance.now() - start }
}

async function streamTtfb(target: Target): Promise<Ttfb> {
  // One after another, round the instances of a target with peers.
  const clients = instancesOf(target).map((t) => new Client(t.origin, { keepAliveTimeout: 30_000 }))
  const client = clients[0]!
  try {
    for (let i = 0; i < settings.streamWarmup; i++) await timeStream(clients[i % clients.length]!)
    const first: number[] = []
    const last: number[] = []
    for (let i = 0; i < settings.streams; i++) {
      const t = await timeStream(clients[i % clients.length]!)
      first.push(t.firstMs)
      last.push(t.lastMs)
    }
    const sorted = sortedCopy(first)
    return {
      medianMs: percentile(sorted, 0.5),
      p99Ms: percentile(sorted, 0.99),
      lastMedianMs: percentile(sortedCopy(last), 0.5),
    }
  } finally {
    await client.close()
    await Promise.all(clients.slice(1).map((c) => c.close()))
  }
}

// ---------------------------------------------------------------------------------------------
// (c2) What a PostgreSQL target costs its database per request, measured around a saturation run:
// the statements its instances sent (their junction_store_statements_total, one per batch), the CPU
// of the database's server processes serving it (a local server: /proc), and how many of them were
// waiting for a lock (pg_stat_activity, sampled every 10 ms). None of the three moves with the
// machine's load as requests/s do.

interface DatabaseCost {
  statementsPerRequest: number
  cpuUsPerRequest: number
  lockWaiting: number
}

async function statementsSent(target: Target): Promise<number> {
  let total = 0
  for (const t of instancesOf(target)) {
    const res = await request(`${t.origin}/metrics`, {
      headers: { authorization: `Bearer ${BENCH_ADMIN_KEY}` },
    })
    const text = await res.body.text()
    for (const m of text.matchAll(/^junction_store_statements_total\{[^}]*\} (\d+)/gm)) total += Number(m[1])
  }
  return total
}

async function databaseCpu(admin: pg.Client, database: string): Promise<Map<number, number>> {
  const { rows } = await admin.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE datname = $1', [
    database,
  ])
  const cpu = new Map<number, number>()
  for (const { pid } of rows) cpu.set(pid, await cpuSeconds(pid).catch(() => 0))
  return cpu
}

async function measureDatabaseCost<T extends { rps: number }>(
  target: Target,
  durationS: number,
  run: () => Promise<T>,
): Promise<T & { database?: DatabaseCost }> {
  const database = target.database
  if (database === undefined) return run()
  const admin = new pg.Client(PG_ADMIN_URL)
  await admin.connect()
  try {
    const statements0 = await statementsSent(target)
    const cpu0 = await databaseCpu(admin, database)
    let sampling = true
    let samples = 0
    let waiting = 0
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await admin.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND wait_event_type = 'Lock'",
          [database],
        )
        samples++
        waiting += rows[0]!.n
        await sleep(10)
      }
    })()
    const result = await run()
    sampling = false
    await sampler
    const cpu1 = await databaseCpu(admin, database)
    const statements = (await statementsSent(target)) - statements0
    let cpu = 0
    for (const [pid, seconds] of cpu1) cpu += seconds - (cpu0.get(pid) ?? 0)
    const requests = result.rps * durationS
    return {
      ...result,
      database: {
        statementsPerRequest: statements / requests,
        cpuUsPerRequest: (cpu * 1e6) / requests,
        lockWaiting: waiting / Math.max(1, samples),
      },
    }
  } finally {
    await admin.end()
  }
}

// ---------------------------------------------------------------------------------------------
// (d) Resident memory with many open streams.

interface Memory {
  beforeMb: number
  withMb: number
  deltaMb: number
  opened: number
}

async function rssMb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8')
  const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1]
  if (kb === undefined) throw new Error(`no VmRSS for process ${pid}`)
  return Number(kb) / 1024
}

/** Resolves once the held stream's first byte has arrived; the stream stays open. */
async function openHeldStream(agent: Dispatcher, origin: string, body: string): Promise<void> {
  const res = await request(`${origin}${CHAT_PATH}`, {
    dispatcher: agent,
    method: 'POST',
    headers: { ...headers, [HOLD_MARKER]: '1' },
    body,
    headersTimeout: 30_000,
  })
  if (res.statusCode !== 200) {
    await res.body.dump()
    throw new Error(`held stream answered ${res.statusCode}`)
  }
  await new Promise((resolve, reject) => {
    res.body.once('data', resolve)
    res.body.once('error', reject)
  })
}

function targetPid(target: Target): number {
  const pid = target.child.proc.pid
  if (pid === undefined) throw new Error(`${target.name} has no pid`)
  return pid
}

interface LoopDelay {
  p99Ms: number
  maxMs: number
  gc: { count: number; totalMs: number; maxMs: number; major: number }
}

/** Asks a child loaded with bench/probe.ts; undefined for one without it (the upstream). */
function probeChild(target: Target, command: string): Promise<Record<string, unknown> | undefined> {
  const proc = target.child.proc
  if (!proc.connected) return Promise.resolve(undefined)
  return new Promise((resolve) => {
    const onMessage = (m: { probe?: string }) => {
      if (m?.probe !== command) return
      proc.off('message', onMessage)
      resolve(m as Record<string, unknown>)
    }
    proc.on('message', onMessage)
    proc.send({ probe: command })
  })
}

async function memoryWithOpenStreams(target: Target, count: number, body: string): Promise<Memory> {
  const pid = targetPid(target)
  const beforeMb = await rssMb(pid)
  const agent = new Agent({ connections: count + 100, keepAliveTimeout: 30_000 })
  try {
    const results = await Promise.allSettled(
      Array.from({ length: count }, () => openHeldStream(agent, target.origin, body)),
    )
    await sleep(1_000)
    const withMb = await rssMb(pid)
    const opened = results.filter((r) => r.status === 'fulfilled').length
    return { beforeMb, withMb, deltaMb: withMb - beforeMb, opened }
  } finally {
    await agent.destroy()
    // Let the target notice the closed connections before anything else is measured.
    await sleep(1_000)
  }
}

// ---------------------------------------------------------------------------------------------
// (e) Resident memory during a 50 MB upload: streamed to disk, it should grow the gateway by far
// less than the file. Sampled every 50 ms while undici sends the body chunk by chunk.

const UPLOAD_MB = 50

interface UploadMemory {
  beforeMb: number
  peakMb: number
  growthMb: number
}

async function memoryDuringUpload(target: Target): Promise<UploadMemory> {
  const pid = targetPid(target)
  const boundary = '----junction-bench'
  async function* body(): AsyncGenerator<Buffer> {
    yield Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`)
    yield Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.bin"\r\n\r\n`,
    )
    // A fresh buffer each time: undici may still hold the previous one.
    for (let i = 0; i < UPLOAD_MB * 16; i++) yield Buffer.alloc(64 * 1024, i % 251)
    yield Buffer.from(`\r\n--${boundary}--\r\n`)
  }
  const beforeMb = await rssMb(pid)
  let peakMb = beforeMb
  let sampling = true
  const sampler = (async () => {
    while (sampling) {
      peakMb = Math.max(peakMb, await rssMb(pid))
      await sleep(50)
    }
  })()
  try {
    const res = await request(`${target.origin}/v1/files`, {
      method: 'POST',
      headers: {
        authorization: headers.authorization,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body: Readable.from(body()),
    })
    const text = await res.body.text()
    if (res.statusCode !== 200) throw new Error(`upload answered ${res.statusCode}: ${text}`)
    const { id } = JSON.parse(text) as { id: string }
    await (await request(`${target.origin}/v1/files/${id}`, { method: 'DELETE', headers })).body.dump()
  } finally {
    sampling = false
    await sampler
  }
  peakMb = Math.max(peakMb, await rssMb(pid))
  return { beforeMb, peakMb, growthMb: peakMb - beforeMb }
}

// ---------------------------------------------------------------------------------------------
// Report

type Figures = Partial<Record<string, number>>

interface Row {
  label: string
  key: string
  digits: number
  /** The gateway÷floor ratio means something for this row. */
  ratio: boolean
}

function buildRows(): Row[] {
  const { connections, rate, streams, openStreams, durationS } = settings
  const sat = `blocking, ${connections} conns, ${durationS} s`
  const fixed = `blocking @ ${rate} req/s`
  return [
    { label: `${sat}: req/s`, key: 'satRps', digits: 0, ratio: true },
    { label: `${sat}: p50 ms`, key: 'satP50', digits: 3, ratio: true },
    { label: `${sat}: p99 ms`, key: 'satP99', digits: 3, ratio: true },
    { label: `${sat}: CPU µs/request`, key: 'satCpu', digits: 0, ratio: true },
    { label: `${sat}: database statements/request`, key: 'dbStatements', digits: 3, ratio: false },
    { label: `${sat}: database CPU µs/request`, key: 'dbCpu', digits: 0, ratio: false },
    { label: `${sat}: sessions waiting for a lock`, key: 'dbLockWaits', digits: 2, ratio: false },
    { label: `${fixed}: p50 ms`, key: 'rateP50', digits: 3, ratio: true },
    { label: `${fixed}: p99 ms`, key: 'rateP99', digits: 3, ratio: true },
    { label: `${fixed}: completed req/s`, key: 'rateDone', digits: 0, ratio: false },
    { label: `${fixed}: event-loop delay p99 ms`, key: 'loopP99', digits: 2, ratio: true },
    { label: `${fixed}: event-loop delay max ms`, key: 'loopMax', digits: 2, ratio: true },
    { label: `${fixed}: GC pauses`, key: 'gcCount', digits: 0, ratio: true },
    { label: `${fixed}: GC ms per second`, key: 'gcTotal', digits: 1, ratio: true },
    { label: `${fixed}: longest GC pause ms`, key: 'gcMax', digits: 2, ratio: true },
    { label: `stream TTFB (${streams} seq.): median ms`, key: 'ttfbMedian', digits: 3, ratio: true },
    { label: `stream TTFB (${streams} seq.): p99 ms`, key: 'ttfbP99', digits: 3, ratio: true },
    { label: `stream last byte: median ms`, key: 'ttlbMedian', digits: 3, ratio: true },
    { label: `RSS MB, idle (second start)`, key: 'rssBefore', digits: 1, ratio: true },
    { label: `RSS MB, ${openStreams} open streams`, key: 'rssWith', digits: 1, ratio: true },
    { label: `RSS MB, delta`, key: 'rssDelta', digits: 1, ratio: true },
    { label: `open streams established`, key: 'opened', digits: 0, ratio: false },
    {
      label: `RSS MB, delta, ${settings.promptStreams} streams of a ${settings.promptKb} KB prompt`,
      key: 'promptDelta',
      digits: 1,
      ratio: true,
    },
    { label: `failed requests (all measures)`, key: 'failures', digits: 0, ratio: false },
  ]
}

function cell(value: number | undefined, digits: number): string {
  return value === undefined || Number.isNaN(value) ? '—' : value.toFixed(digits)
}

function printTable(results: Record<TargetName, Figures>): void {
  const head = [
    'measure',
    'gateway',
    'gw sqlite',
    'gw postgres',
    'gw postgres ×2',
    'floor',
    'upstream',
    'gateway÷floor',
  ]
  const body = buildRows().map((row) => {
    const [g, q, p, p2, f, u] = (
      ['gateway', 'gateway-sqlite', 'gateway-postgres', 'gateway-postgres-2', 'floor', 'upstream'] as const
    ).map((t) => results[t][row.key])
    const ratio = row.ratio && g !== undefined && f !== undefined && f !== 0 ? `${(g / f).toFixed(2)}×` : ''
    return [
      row.label,
      cell(g, row.digits),
      cell(q, row.digits),
      cell(p, row.digits),
      cell(p2, row.digits),
      cell(f, row.digits),
      cell(u, row.digits),
      ratio,
    ]
  })
  const widths = head.map((_, i) => Math.max(...[head, ...body].map((r) => (r[i] as string).length)))
  const line = (r: string[]): string =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i] as number) : c.padStart(widths[i] as number))).join('  ')
  console.log(line(head))
  console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  for (const r of body) console.log(line(r))
}

/**
 * The targets of the benchmark, each PASS or FAIL. "Added" time is the time a proxy adds to the
 * upstream's own (its figure minus the upstream's), compared with what the bare proxy adds.
 */
function printTargets(results: Record<TargetName, Figures>): void {
  const { gateway, floor, upstream } = results
  // The shipped defaults: the embedded SQLite database and info logging.
  const shipped = results['gateway-sqlite']
  const verdict = (ok: boolean): string => (ok ? 'PASS' : 'FAIL')
  const ms = (n: number): string => `${n >= 0 ? '+' : ''}${n.toFixed(3)} ms`
  const added = (t: Figures, key: string): number => (t[key] ?? Number.NaN) - (upstream[key] ?? Number.NaN)
  const line = (ok: boolean, text: string): void => console.log(`${verdict(ok)}  ${text}`)

  const level = process.env['BENCH_LOG_LEVEL'] ?? 'info'
  console.log(
    `Targets, for the shipped defaults (gw sqlite, ${level} logging${level === 'info' ? '' : ': not the shipped info'}) against the bare proxy:`,
  )
  // Issue 28's targets.
  const rpsRatio = (shipped.satRps ?? 0) / (floor.satRps ?? Number.NaN)
  line(rpsRatio >= 0.6, `requests/s ≥ 0.6× the bare proxy: ${rpsRatio.toFixed(2)}×`)
  const cpuRatio = (shipped.satCpu ?? Number.NaN) / (floor.satCpu ?? Number.NaN)
  line(cpuRatio <= 2, `CPU per blocking request ≤ 2× the bare proxy's: ${cpuRatio.toFixed(2)}×`)
  const p99 = added(shipped, 'rateP99')
  const p99Floor = added(floor, 'rateP99')
  line(
    p99 <= 3 * Math.max(p99Floor, 0.001),
    `added p99 at ${settings.rate} req/s ≤ 3× the bare proxy's: ${ms(p99)} vs ${ms(p99Floor)}`,
  )
  console.log(
    `      (event-loop delay p99 at ${settings.rate} req/s: ${cell(shipped.loopP99, 2)} ms vs ` +
      `${cell(floor.loopP99, 2)} ms; longest GC pause ${cell(shipped.gcMax, 2)} ms vs ${cell(floor.gcMax, 2)} ms)`,
  )
  const ttfb = added(shipped, 'ttfbMedian')
  const ttfbFloor = added(floor, 'ttfbMedian')
  line(
    ttfb <= ttfbFloor + 0.25,
    `stream added time to first byte ≤ bare proxy + 0.25 ms: ${ms(ttfb)} vs ${ms(ttfbFloor)}`,
  )
  const ttlb = added(shipped, 'ttlbMedian')
  const ttlbFloor = added(floor, 'ttlbMedian')
  line(
    ttlb <= ttlbFloor + 0.4,
    `stream added time to last byte (100 chunks) ≤ bare proxy + 0.4 ms: ${ms(ttlb)} vs ${ms(ttlbFloor)}`,
  )
  const idle = shipped.rssBefore ?? Number.NaN
  line(idle <= 130, `idle RSS ≤ 130 MB: ${idle.toFixed(1)} MB`)
  const streamsRatio = (shipped.rssDelta ?? Number.NaN) / (floor.rssDelta ?? Number.NaN)
  line(
    streamsRatio <= 1.5,
    `RSS for ${settings.openStreams} open streams ≤ 1.5× the bare proxy's increase: ${streamsRatio.toFixed(2)}× ` +
      `(+${cell(shipped.rssDelta, 1)} MB vs +${cell(floor.rssDelta, 1)} MB)`,
  )

  console.log('Storage (issue 10): SQLite against the memory backend')
  const sqlite = shipped
  const storeRatio = (sqlite.satRps ?? 0) / (gateway.satRps ?? Number.NaN)
  line(storeRatio >= 0.9, `SQLite gateway requests/s ≥ 0.9× memory: ${storeRatio.toFixed(2)}×`)
  const storeGap = (sqlite.ttfbMedian ?? Number.NaN) - (gateway.ttfbMedian ?? Number.NaN)
  line(storeGap < 0.1, `SQLite stream time to first byte within 0.1 ms of memory: ${ms(storeGap)}`)
  const postgres = results['gateway-postgres']
  const pgRatio = (postgres.satRps ?? 0) / (gateway.satRps ?? Number.NaN)
  const pgGap = (postgres.ttfbMedian ?? Number.NaN) - (gateway.ttfbMedian ?? Number.NaN)
  console.log(
    `info  PostgreSQL (one instance, local database): requests/s ${pgRatio.toFixed(2)}× memory, ` +
      `stream time to first byte ${ms(pgGap)}`,
  )

  console.log('Scale-out (issue 27): PostgreSQL against SQLite, and two PostgreSQL instances against one')
  const pgSqlite = (postgres.satRps ?? 0) / (sqlite.satRps ?? Number.NaN)
  line(pgSqlite >= 0.8, `PostgreSQL requests/s ≥ 0.8× SQLite's: ${pgSqlite.toFixed(2)}×`)
  const p50Gap = (postgres.rateP50 ?? Number.NaN) - (sqlite.rateP50 ?? Number.NaN)
  line(p50Gap <= 0.3, `PostgreSQL p50 at ${settings.rate} req/s within +0.3 ms of SQLite's: ${ms(p50Gap)}`)
  const ttfbGap = (postgres.ttfbMedian ?? Number.NaN) - (sqlite.ttfbMedian ?? Number.NaN)
  line(ttfbGap <= 0.3, `PostgreSQL stream time to first byte within +0.3 ms of SQLite's: ${ms(ttfbGap)}`)
  const two = results['gateway-postgres-2']
  const scale = (two.satRps ?? 0) / (postgres.satRps ?? Number.NaN)
  line(
    scale >= 1.6,
    `two instances ≥ 1.6× one: ${scale.toFixed(2)}×${pinCores ? ' (each on its own core)' : ' (not pinned: no taskset or one core)'}`,
  )
  const perRequest = (t: Figures) =>
    `${cell(t.dbStatements, 3)} statements, ${cell(t.dbCpu, 0)} µs database CPU, ${cell(t.dbLockWaits, 2)} sessions waiting for a lock`
  // Each instance batches its own calls: at half the load each, its batches are about half as big, so
  // the statements a request costs the database may double at most; the sessions waiting for a lock
  // (sampled) may grow by half a session at most.
  const flat =
    (two.dbStatements ?? Number.NaN) <= 2 * (postgres.dbStatements ?? Number.NaN) &&
    (two.dbLockWaits ?? Number.NaN) <= (postgres.dbLockWaits ?? Number.NaN) + 0.5
  line(
    flat,
    `database work per request ≤ 2× with two instances, sessions waiting for a lock at most 0.5 more: one ${perRequest(postgres)}; two ${perRequest(two)}`,
  )
}

// ---------------------------------------------------------------------------------------------

function addFailures(figures: Figures, n: number): void {
  figures.failures = (figures.failures ?? 0) + n
}

/** Each figure's median over the rounds that have it (the lower of the middle two for an even count). */
function medianOfRounds(rounds: Figures[]): Figures {
  const out: Figures = {}
  for (const key of new Set(rounds.flatMap((r) => Object.keys(r)))) {
    const values = rounds.map((r) => r[key]).filter((v): v is number => v !== undefined && !Number.isNaN(v))
    if (values.length > 0) out[key] = percentile(sortedCopy(values), 0.5)
  }
  return out
}

/** What the medians hide: each round's requests/s at saturation and its ratio to the bare proxy's. */
function printRounds(targets: Target[], rounds: Record<TargetName, Figures[]>): void {
  if (settings.rounds < 2) return
  const floor = rounds.floor
  console.log('\nrequests/s at saturation in each round (÷ the bare proxy in the same round):')
  for (const t of targets) {
    const cells = rounds[t.name].map((f, i) => {
      const base = floor[i]?.satRps
      const rps = f.satRps ?? Number.NaN
      return t.name === 'floor' || base === undefined
        ? rps.toFixed(0)
        : `${rps.toFixed(0)} (${(rps / base).toFixed(2)}×)`
    })
    console.log(`  ${t.name.padEnd(20)} ${cells.join('  ')}`)
  }
}

async function measureAll(targets: Target[], wrkScript: string): Promise<Record<TargetName, Figures>> {
  const results: Record<TargetName, Figures> = {
    gateway: {},
    'gateway-sqlite': {},
    'gateway-postgres': {},
    'gateway-postgres-2': {},
    floor: {},
    upstream: {},
  }
  // Memory first: after the load tests the heaps have grown, and the streams would fit in the slack.
  for (const t of targets.filter((x) => x.name !== 'upstream' && x.peers === undefined)) {
    console.log(`· ${t.name}: memory with ${settings.openStreams} open streams`)
    const m = await memoryWithOpenStreams(t, settings.openStreams, holdBody)
    Object.assign(results[t.name], { rssBefore: m.beforeMb, rssWith: m.withMb, rssDelta: m.deltaMb })
    results[t.name].opened = m.opened
    // After the 1000 (on the heap they left), for every target alike: not a target, the cost of a prompt kept.
    console.log(
      `· ${t.name}: memory with ${settings.promptStreams} open streams of a ${settings.promptKb} KB prompt`,
    )
    const p = await memoryWithOpenStreams(t, settings.promptStreams, promptHoldBody)
    if (p.opened !== settings.promptStreams) throw new Error(`${t.name}: ${p.opened} prompt streams opened`)
    results[t.name].promptDelta = p.deltaMb
  }
  const gateway = targets.find((t) => t.name === 'gateway')
  if (gateway) {
    console.log(`· gateway: memory during a ${UPLOAD_MB} MB upload`)
    const u = await memoryDuringUpload(gateway)
    Object.assign(results.gateway, {
      uploadBefore: u.beforeMb,
      uploadPeak: u.peakMb,
      uploadGrowth: u.growthMb,
    })
  }
  // The load measures in rounds, the targets in another order each round: the machine's speed drifts by
  // tens of per cent over minutes (it is shared), so every target meets each phase of it, and a figure is
  // the median of its rounds (failures are added up).
  const rounds = Object.fromEntries(targets.map((t) => [t.name, [] as Figures[]])) as Record<
    TargetName,
    Figures[]
  >
  for (let round = 0; round < settings.rounds; round++) {
    const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
    const figures = Object.fromEntries(targets.map((t) => [t.name, {} as Figures])) as Record<
      TargetName,
      Figures
    >
    const tag = `round ${round + 1}/${settings.rounds}`
    for (const t of order) {
      console.log(`· ${tag}, ${t.name}: warm-up, then blocking chat at saturation`)
      await saturate(t, round === 0 ? settings.firstWarmupS : settings.warmupS, wrkScript)
      const s = await measureDatabaseCost(t, settings.durationS, () =>
        saturateWithCpu(t, settings.durationS, wrkScript),
      )
      Object.assign(figures[t.name], {
        satRps: s.rps,
        satP50: s.p50Ms,
        satP99: s.p99Ms,
        satCpu: s.cpuUsPerRequest,
      })
      if (s.database)
        Object.assign(figures[t.name], {
          dbStatements: s.database.statementsPerRequest,
          dbCpu: s.database.cpuUsPerRequest,
          dbLockWaits: s.database.lockWaiting,
        })
      addFailures(results[t.name], s.failures)
    }
    for (const t of order) {
      console.log(`· ${tag}, ${t.name}: blocking chat at ${settings.rate} req/s`)
      await probeChild(t, 'loop-reset')
      const r = await constantRate(t, settings.rate, settings.durationS)
      const loop = (await probeChild(t, 'loop-read')) as LoopDelay | undefined
      Object.assign(figures[t.name], {
        rateP50: r.p50Ms,
        rateP99: r.p99Ms,
        rateDone: r.completedRps,
        loopP99: loop?.p99Ms,
        loopMax: loop?.maxMs,
        gcCount: loop?.gc.count,
        gcMax: loop?.gc.maxMs,
        gcTotal: loop ? loop.gc.totalMs / settings.durationS : undefined,
      })
      addFailures(results[t.name], r.failures)
    }
    for (const t of order) {
      console.log(`· ${tag}, ${t.name}: time to first byte of ${settings.streams} streams`)
      const s = await streamTtfb(t)
      Object.assign(figures[t.name], { ttfbMedian: s.medianMs, ttfbP99: s.p99Ms, ttlbMedian: s.lastMedianMs })
    }
    for (const t of targets) rounds[t.name].push(figures[t.name])
  }
  for (const t of targets) Object.assign(results[t.name], medianOfRounds(rounds[t.name]))
  printRounds(targets, rounds)
  return results
}

// ---------------------------------------------------------------------------------------------
// (f) Soak: a steady rate for minutes, RSS sampled all along. Memory that grows with the number of
// requests served (a leak) shows as end > start; a heap that only breathes comes back down.

/** How often the soak reads the gateway's RSS. */
const SOAK_SAMPLE_S = 10
/** The first part of the soak warms the heap and the caches; "start" is read after it. */
const SOAK_WARMUP_S = 60

interface Soak {
  samples: { atS: number; rssMb: number }[]
  sent: number
  /** Answers other than 200, by status ("error" for a request that got no answer). */
  failures: Map<string, number>
  /** Requests not sent because too many were in flight: the gateway could not keep the rate. */
  behind: number
}

async function soak(target: Target, rate: number, durationS: number): Promise<Soak> {
  const pid = targetPid(target)
  const pool = new Pool(target.origin, { connections: settings.connections, keepAliveTimeout: 30_000 })
  const samples: Soak['samples'] = []
  const failures = new Map<string, number>()
  const fail = (kind: string) => failures.set(kind, (failures.get(kind) ?? 0) + 1)
  let behind = 0
  let sent = 0
  const inFlight = new Set<Promise<void>>()
  const one = async (stream: boolean): Promise<void> => {
    try {
      const res = await pool.request({
        method: 'POST',
        path: CHAT_PATH,
        headers,
        body: stream ? streamBody : blockingBody,
      })
      await res.body.dump({ limit: Number.POSITIVE_INFINITY })
      if (res.statusCode !== 200) fail(String(res.statusCode))
    } catch {
      fail('error')
    }
  }
  const start = performance.now()
  let nextSample = 0
  try {
    while (true) {
      const elapsedS = (performance.now() - start) / 1000
      if (elapsedS >= nextSample) {
        samples.push({ atS: Math.round(elapsedS), rssMb: await rssMb(pid) })
        if (nextSample > 0 && nextSample % 60 === 0)
          console.log(`  ${nextSample} s: RSS ${samples.at(-1)!.rssMb.toFixed(1)} MB`)
        nextSample += SOAK_SAMPLE_S
      }
      if (elapsedS >= durationS) break
      const due = Math.floor(elapsedS * rate)
      while (sent < due) {
        // Past BENCH_CONNECTIONS in flight the gateway is behind: count what cannot be sent.
        if (inFlight.size >= settings.connections * 4) {
          behind++
          sent++
          continue
        }
        const p = one(sent % 10 === 9).finally(() => inFlight.delete(p))
        inFlight.add(p)
        sent++
      }
      await sleep(1)
    }
    await Promise.all(inFlight)
    // Let timers and the last writes settle before the final reading.
    await sleep(2_000)
    samples.push({ atS: Math.round((performance.now() - start) / 1000), rssMb: await rssMb(pid) })
  } finally {
    await pool.close()
  }
  return { samples, sent, failures, behind }
}

async function soakOnly(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-bench-'))
  workDir = dir
  try {
    const upstream = await startUpstream()
    const config = await writeGatewayConfig(dir)
    const gateway = await startGateway('gateway-sqlite', upstream.origin, config, dir)
    await checkTarget(gateway)
    const rate = settings.soakRate
    console.log(
      `Junction soak: node ${process.versions.node}, gw sqlite at ${rate} req/s (one in ten streamed) ` +
        `for ${settings.soakS} s, RSS every ${SOAK_SAMPLE_S} s`,
    )
    const s = await soak(gateway, rate, settings.soakS)
    const first = s.samples[0]!.rssMb
    const at = (t: number) => s.samples.find((x) => x.atS >= t) ?? s.samples[0]!
    const warm = at(Math.min(SOAK_WARMUP_S, settings.soakS / 5))
    const mid = at(settings.soakS / 2)
    const end = s.samples.at(-1)!
    const peak = Math.max(...s.samples.map((x) => x.rssMb))
    console.log('')
    const failed = [...s.failures.values()].reduce((a, b) => a + b, 0)
    const kinds = [...s.failures].map(([k, n]) => `${k}: ${n}`).join(', ')
    console.log(
      `requests due ${s.sent}, failed ${failed}${kinds ? ` (${kinds})` : ''}, ` +
        `not sent because ${settings.connections * 4} were in flight (the gateway fell behind) ${s.behind}`,
    )
    console.log(
      `RSS MB: at start ${first.toFixed(1)}, after warm-up (${warm.atS} s) ${warm.rssMb.toFixed(1)}, ` +
        `half-way (${mid.atS} s) ${mid.rssMb.toFixed(1)}, at end (${end.atS} s) ${end.rssMb.toFixed(1)}, ` +
        `peak ${peak.toFixed(1)}`,
    )
    // The heap grows to the size the load needs, then breathes: memory that grows with the requests
    // served keeps growing through the second half too, where a settled heap does not.
    const growth = end.rssMb - mid.rssMb
    const ok = growth <= Math.max(5, mid.rssMb * 0.02) && failed === 0 && s.behind === 0
    console.log(
      `${ok ? 'PASS' : 'FAIL'}  no growth in the second half of the soak (end ≤ half-way + 2 %, every request ` +
        `sent and answered): ${growth >= 0 ? '+' : ''}${growth.toFixed(1)} MB`,
    )
  } finally {
    await cleanUp()
  }
}

async function main(): Promise<void> {
  if (settings.soakS > 0) return soakOnly()
  const dir = await mkdtemp(join(tmpdir(), 'junction-bench-'))
  workDir = dir
  try {
    // This process makes the fixed-rate requests and the streams: on the load's core.
    await pin(process.pid, LOAD_CPU)
    const upstream = await startUpstream()
    const config = await writeGatewayConfig(dir)
    const gateway = await startGateway('gateway', upstream.origin, config, dir, undefined, MEASURED_CPU)
    const gatewaySqlite = await startGateway(
      'gateway-sqlite',
      upstream.origin,
      config,
      dir,
      undefined,
      MEASURED_CPU,
    )
    const gatewayPostgres = await startGateway(
      'gateway-postgres',
      upstream.origin,
      config,
      dir,
      await createBenchDatabase(),
      MEASURED_CPU,
    )
    // Two instances on one database, each on its own core when it can be (the load generator, the
    // upstream and the database share the cores anyway).
    const twoUrl = await createBenchDatabase()
    const first = await startGateway(
      'gateway-postgres-2',
      upstream.origin,
      config,
      dir,
      twoUrl,
      pinCores ? 0 : undefined,
    )
    const second = await startGateway(
      'gateway-postgres-2',
      upstream.origin,
      config,
      dir,
      twoUrl,
      pinCores ? 1 : undefined,
    )
    const gatewayPostgres2: Target = { ...first, peers: [second] }
    const floor = await startFloor(upstream.origin, dir)
    const targets = [gateway, gatewaySqlite, gatewayPostgres, gatewayPostgres2, floor, upstream]
    for (const t of targets) for (const i of instancesOf(t)) await checkTarget(i)

    const generator = wrkPath ? 'wrk -t1' : 'autocannon'
    console.log(
      `Junction bench: node ${process.versions.node}, ${cores} cores` +
        (pinCores ? ' (measured process on core 0, load on core 1)' : '') +
        ', ' +
        `saturation by ${generator}, fixed rate and streams by undici; ` +
        `gateway upstream pool raised to ${settings.openStreams + 100} connections`,
    )
    const results = await measureAll(targets, await writeWrkScript(dir))
    console.log('')
    printTable(results)
    console.log('')
    const g = results.gateway
    console.log(
      `gateway, ${UPLOAD_MB} MB upload: RSS ${cell(g.uploadBefore, 1)} MB before, peak ${cell(g.uploadPeak, 1)} MB, ` +
        `growth ${cell(g.uploadGrowth, 1)} MB (streamed to disk: far less than the file)`,
    )
    console.log('')
    printTargets(results)
  } finally {
    await cleanUp()
  }
}

process.once('SIGINT', () => {
  void cleanUp().finally(() => process.exit(130))
})
process.once('exit', () => {
  for (const tool of tools) tool.kill('SIGKILL')
  for (const child of children) if (!exited(child)) child.proc.kill('SIGKILL')
})

main().catch(async (err: unknown) => {
  console.error('bench failed:', err)
  await cleanUp()
  process.exitCode = 1
})

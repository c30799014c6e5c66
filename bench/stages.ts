import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { request } from 'undici'
import { freePort } from './free-port.ts'
import { cpuSeconds } from './proc-stat.ts'

// `npm run bench:stages`: where a request's CPU goes, stage by stage. Each target (the bare Fastify +
// undici proxy, the gateway on the memory store, the gateway on SQLite) serves a fixed number of
// blocking requests, then of streamed ones (100 chunks), driven by autocannon; meanwhile the V8 sampling
// profiler runs on its main thread (bench/probe.ts) and its CPU time is read from /proc. Every sample is
// given to the stage of the innermost frame that names one (`stageOf`: the file and function it is in,
// or the library), and a stage's µs per request is its share of the samples times the main thread's CPU
// per request. The sampler counts where the thread is when it runs: a step that wakes another thread (a
// socket write, a message to the database thread) can be descheduled there on a busy machine and is
// over-counted; the CPU of the other threads is read per kind of thread from /proc. Shares of samples do
// not move much with the machine's load otherwise; the CPU per request is
// measured over the same requests, and the bare proxy's column is the baseline of the same run.
// Knobs: BENCH_STAGES_REQUESTS (blocking requests per target, 20 000), BENCH_STAGES_STREAMS (streamed
// requests, 4 000), BENCH_STAGES_ROUNDS (2: each figure is the median of the rounds),
// BENCH_STAGES_TARGETS (floor,memory,sqlite; `label=memory@DIR` or `label=sqlite@DIR` adds the gateway of
// another checkout, to compare a change with its parent in one run), BENCH_STAGES_INTERVAL_US (sampling interval, 250),
// BENCH_STAGES_KINDS (blocking,streamed), BENCH_STAGES_KEEP (a directory to keep the profiles in), BENCH_CONNECTIONS (20), BENCH_STAGES_TOP (also print the N costliest functions of each column, 0).
//   npm run bench:stages

const root = fileURLToPath(new URL('..', import.meta.url))
const env = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback)
  if (!Number.isFinite(v) || v < 0) throw new Error(`${name} must be a number ≥ 0`)
  return v
}
const settings = {
  requests: env('BENCH_STAGES_REQUESTS', 20_000),
  streams: env('BENCH_STAGES_STREAMS', 4_000),
  rounds: Math.max(1, env('BENCH_STAGES_ROUNDS', 2)),
  intervalUs: env('BENCH_STAGES_INTERVAL_US', 250),
  connections: env('BENCH_CONNECTIONS', 20),
  top: env('BENCH_STAGES_TOP', 0),
  targets: (process.env['BENCH_STAGES_TARGETS'] ?? 'floor,memory,sqlite').split(',').filter(Boolean),
  kinds: (process.env['BENCH_STAGES_KINDS'] ?? 'blocking,streamed').split(',').filter(Boolean) as Kind[],
}
const CHAT_PATH = '/v1/chat/completions'
const messages = [{ role: 'user', content: 'hello' }]
const bodies = {
  blocking: JSON.stringify({ model: 'openai/gpt-4o-mini', messages }),
  streamed: JSON.stringify({ model: 'openai/gpt-4o-mini', messages, stream: true }),
}
type Kind = keyof typeof bodies

// ---------------------------------------------------------------------------------------------
// Stages: a frame names a stage by its file (and, in a few files, its function), or its library.
// Frames that name none (node's event and task queues, zod, builtins) leave the sample to the caller.

interface CallFrame {
  functionName: string
  url: string
}

const SRC = '/src/'
const byFile: [RegExp, string][] = [
  [/\/src\/auth\//, 'auth (key lookup)'],
  [/\/src\/http\/json-body\.ts$/, 'body parse'],
  [/\/src\/schemas\//, 'schema (zod parse)'],
  [/\/src\/routing\//, 'routing'],
  [/\/src\/routes\/admission\.ts$/, 'admission'],
  [/\/src\/billing\/(prices|overage|money)\.ts$/, 'record (pricing)'],
  [/\/src\/billing\/tokens\.ts$/, 'token bound / meter'],
  [/\/src\/store\/sqlite\/thread\.ts$/, 'store calls (thread messaging)'],
  [/\/src\/store\//, 'store calls'],
  [/\/src\/providers\/[^/]+\/request\.ts$/, 'upstream request build'],
  [/\/src\/providers\/[^/]+\/(response|stream|stream-template|wire|errors)\.ts$/, 'response translation'],
  [/\/src\/providers\/shared\//, 'response translation'],
  [/\/src\/providers\//, 'upstream call'],
  [/\/src\/sse\.ts$/, 'SSE framing'],
  [/\/src\/inference\/chunk-text\.ts$/, 'SSE framing'],
  [/\/src\/inference\/generation\.ts$/, 'generation lifecycle'],
  [/\/src\/inference\//, 'pipeline (route → attempts)'],
  [/\/src\/routes\/upstream-signal\.ts$/, 'pipeline (route → attempts)'],
  [/\/src\/routes\//, 'route handler'],
  [/\/src\/metrics\.ts$/, 'metrics'],
  [/\/src\/logger\.ts$/, 'log line'],
  [/\/src\/ids\.ts$/, 'ids'],
  [/\/src\/http\/tracing\.ts$/, 'app hooks'],
  [/\/src\/http\//, 'http guards'],
  [/\/src\/app\.ts$/, 'app hooks'],
  [/\/bench\/floor-proxy\.ts$/, 'route handler'],
]
const meteringStage: Record<string, string> = {
  admit: 'admission',
  admitRequest: 'admission',
  costBound: 'admission',
  discountFor: 'admission',
  buildRecord: 'record (pricing)',
  normalizeUsage: 'record (pricing)',
  hasUsage: 'record (pricing)',
}
const byLibrary: [RegExp, string][] = [
  [
    /\/node_modules\/(pino|sonic-boom|thread-stream|fast-redact|@pinojs|quick-format-unescaped|pino-std-serializers)\//,
    'log line',
  ],
  [/\/node_modules\/(prom-client|tdigest|bintrees)\//, 'metrics'],
  [/\/node_modules\/undici\//, 'upstream call'],
  [/\/node_modules\/eventsource-parser\//, 'response translation'],
  [
    /\/node_modules\/(fastify|find-my-way|avvio|@fastify|fast-json-stringify|secure-json-parse|light-my-request|fast-querystring|process-warning|abstract-logging|toad-cache|fast-content-type-parse|rfdc)\//,
    'framework (Fastify)',
  ],
  [
    /^node:(net|_http_\w+|http|stream|internal\/streams\/.*|internal\/stream_base_commons|internal\/http|internal\/net)$/,
    'HTTP & sockets (node)',
  ],
]

function stageOfFrame(f: CallFrame): string | undefined {
  if (f.functionName === '(garbage collector)') return 'GC'
  if (f.functionName === '(program)') return 'V8 / native (unattributed)'
  const url = f.url
  if (url.includes(SRC) || url.includes('/bench/')) {
    if (url.endsWith('/src/billing/metering.ts')) return meteringStage[f.functionName] ?? 'settle'
    if (url.endsWith('/src/app.ts') && f.functionName === 'logRequest') return 'log line'
    for (const [re, stage] of byFile) if (re.test(url)) return stage
    return undefined
  }
  for (const [re, stage] of byLibrary) if (re.test(url)) return stage
  return undefined
}

interface ProfileNode {
  id: number
  callFrame: CallFrame
  children?: number[]
}
interface CpuProfile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

interface Breakdown {
  /** Stage → share of the non-idle samples. */
  shares: Map<string, number>
  /** "function file" → share of the samples, self time. */
  functions: Map<string, number>
}

function breakdown(profile: CpuProfile): Breakdown {
  const parent = new Map<number, number>()
  const node = new Map<number, ProfileNode>()
  for (const n of profile.nodes) {
    node.set(n.id, n)
    for (const c of n.children ?? []) parent.set(c, n.id)
  }
  const memo = new Map<number, string>()
  const classify = (id: number): string => {
    const known = memo.get(id)
    if (known !== undefined) return known
    const chain: number[] = []
    let stage: string | undefined
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const cached = memo.get(at)
      if (cached !== undefined) {
        stage = cached
        break
      }
      chain.push(at)
      stage = stageOfFrame(node.get(at)!.callFrame)
      if (stage !== undefined) break
    }
    const s = stage ?? 'node core (other)'
    for (const c of chain) memo.set(c, s)
    return s
  }
  const counts = new Map<string, number>()
  const functions = new Map<string, number>()
  let total = 0
  for (const id of profile.samples) {
    const f = node.get(id)!.callFrame
    if (f.functionName === '(idle)') continue
    total++
    const s = classify(id)
    counts.set(s, (counts.get(s) ?? 0) + 1)
    const name = `${f.functionName || '(anonymous)'} ${f.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/')}`
    functions.set(name, (functions.get(name) ?? 0) + 1)
  }
  const share = (m: Map<string, number>) => new Map([...m].map(([k, v]) => [k, v / Math.max(1, total)]))
  return { shares: share(counts), functions: share(functions) }
}

// ---------------------------------------------------------------------------------------------
// Processes

const children: ChildProcess[] = []

async function waitFor(url: string, proc: ChildProcess): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (proc.exitCode !== null) throw new Error(`${url}: the process exited (${proc.exitCode})`)
    try {
      const r = await request(url)
      await r.body.dump()
      return
    } catch {
      await sleep(100)
    }
  }
  throw new Error(`${url} never answered`)
}

interface Target {
  name: string
  origin: string
  proc: ChildProcess
}

/** `checkout`: run the script of another checkout (its own src/, this bench's probe). */
function spawnNode(
  script: string,
  extra: Record<string, string>,
  probe: boolean,
  checkout?: string,
): ChildProcess {
  const args = [
    '--disable-warning=ExperimentalWarning',
    ...(probe ? ['--import', join(root, 'bench/probe.ts')] : []),
    script,
  ]
  const proc = spawn(process.execPath, args, {
    cwd: checkout ?? root,
    env: { PATH: process.env.PATH ?? '', ...extra },
    stdio: ['ignore', 'ignore', 'inherit', ...(probe ? (['ipc'] as const) : [])],
  })
  children.push(proc)
  return proc
}

/** Sends a probe command and waits for its answer. */
function probe(t: Target, command: Record<string, unknown>): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const onMessage = (m: { probe?: string; error?: string }) => {
      if (m?.probe !== command.probe) return
      t.proc.off('message', onMessage)
      if (m.error) reject(new Error(m.error))
      else resolve(m as Record<string, unknown>)
    }
    t.proc.on('message', onMessage)
    t.proc.send(command)
  })
}

/** The process's threads by what Node names them: the rows under the stages. */
const threadKinds: [RegExp, string][] = [
  [/^WorkerThread$/, 'worker threads (database, checkpoints, tokens)'],
  [/^(V8Worker|DelayedTaskSche)/, 'V8 helper threads (GC, compiler)'],
  [/^libuv-worker$/, 'libuv thread pool (files, log writes)'],
  // The sampling profiler's own thread: the measurement's cost, not the gateway's.
  [/^v8:ProfEvntProc$/, 'profiler thread (not the gateway)'],
]

interface Cpu {
  /** CPU seconds (user + system) of the main thread. */
  main: number
  /** Of the whole process, threads gone included. */
  all: number
  /** Of the live threads of each kind of `threadKinds`. */
  kinds: Map<string, number>
}

async function cpu(pid: number): Promise<Cpu> {
  const kinds = new Map<string, number>()
  for (const tid of await readdir(`/proc/${pid}/task`)) {
    try {
      const comm = (await readFile(`/proc/${pid}/task/${tid}/comm`, 'utf8')).trim()
      const kind = threadKinds.find(([re]) => re.test(comm))?.[1]
      if (kind) kinds.set(kind, (kinds.get(kind) ?? 0) + (await cpuSeconds(`${pid}/task/${tid}`)))
    } catch {
      // The thread ended meanwhile.
    }
  }
  return { main: await cpuSeconds(`${pid}/task/${pid}`), all: await cpuSeconds(pid), kinds }
}

async function load(t: Target, kind: Kind, amount: number): Promise<{ bad: number; rps: number }> {
  const { stdout } = await promisify(execFile)(
    join(root, 'node_modules/.bin/autocannon'),
    [
      '-j',
      '-c',
      String(settings.connections),
      '-a',
      String(amount),
      '-m',
      'POST',
      '-H',
      'authorization=Bearer sk-dev',
      '-H',
      'content-type=application/json',
      '-b',
      bodies[kind],
      `${t.origin}${CHAT_PATH}`,
    ],
    { maxBuffer: 1 << 24 },
  )
  const r = JSON.parse(stdout) as { non2xx: number; errors: number; requests: { average: number } }
  return { bad: r.non2xx + r.errors, rps: r.requests.average }
}

interface Measure {
  mainUs: number
  allUs: number
  /** µs per request of each kind of thread. */
  threadsUs: Map<string, number>
  rps: number
  split: Breakdown
}

async function measure(t: Target, kind: Kind, dir: string, round: number): Promise<Measure> {
  const amount = kind === 'blocking' ? settings.requests : settings.streams
  // Warm-up: the JIT and the caches, outside the profile.
  await load(t, kind, Math.max(200, Math.floor(amount / 5)))
  const path = join(dir, `${t.name}-${kind}-${round}.cpuprofile`)
  await probe(t, { probe: 'profile-start', intervalUs: settings.intervalUs })
  const before = await cpu(t.proc.pid!)
  const r = await load(t, kind, amount)
  const after = await cpu(t.proc.pid!)
  await probe(t, { probe: 'profile-stop', path })
  if (r.bad > 0) throw new Error(`${t.name} ${kind}: ${r.bad} requests failed`)
  const profile = JSON.parse(await readFile(path, 'utf8')) as CpuProfile
  // BENCH_STAGES_KEEP=DIR keeps the profiles (open them in Chrome's DevTools).
  const keep = process.env['BENCH_STAGES_KEEP']
  if (keep) {
    // Made if missing; copied, since it may be on another file system than the scratch directory.
    await mkdir(keep, { recursive: true })
    await copyFile(path, join(keep, `${t.name}-${kind}-${round}.cpuprofile`))
  }
  await rm(path)
  return {
    mainUs: ((after.main - before.main) * 1e6) / amount,
    allUs: ((after.all - before.all) * 1e6) / amount,
    threadsUs: new Map(
      threadKinds.map(([, kind]) => [
        kind,
        (((after.kinds.get(kind) ?? 0) - (before.kinds.get(kind) ?? 0)) * 1e6) / amount,
      ]),
    ),
    rps: r.rps,
    split: breakdown(profile),
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length === 0 ? Number.NaN : s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

// ---------------------------------------------------------------------------------------------

interface Column {
  label: string
  runs: Measure[]
}

function stageUs(m: Measure, stage: string): number {
  return (m.split.shares.get(stage) ?? 0) * m.mainUs
}

function printTable(columns: Column[]): void {
  const stages = new Set<string>()
  for (const c of columns) for (const m of c.runs) for (const s of m.split.shares.keys()) stages.add(s)
  const order = [...stages].sort(
    (a, b) =>
      Math.max(...columns.map((c) => median(c.runs.map((m) => stageUs(m, b))))) -
      Math.max(...columns.map((c) => median(c.runs.map((m) => stageUs(m, a))))),
  )
  const rows: string[][] = []
  for (const s of order)
    rows.push([s, ...columns.map((c) => median(c.runs.map((m) => stageUs(m, s))).toFixed(1))])
  rows.push([])
  rows.push([
    'main thread, µs CPU per request',
    ...columns.map((c) => median(c.runs.map((m) => m.mainUs)).toFixed(1)),
  ])
  for (const [, kind] of threadKinds)
    rows.push([kind, ...columns.map((c) => median(c.runs.map((m) => m.threadsUs.get(kind) ?? 0)).toFixed(1))])
  rows.push([
    'whole process, µs CPU per request',
    ...columns.map((c) => median(c.runs.map((m) => m.allUs)).toFixed(1)),
  ])
  rows.push([
    'req/s while profiled (load-dependent)',
    ...columns.map((c) => median(c.runs.map((m) => m.rps)).toFixed(0)),
  ])
  const head = ['stage (µs of main-thread CPU per request)', ...columns.map((c) => c.label)]
  // Ratios to the floor of the same kind, for the whole-process CPU.
  const ratio = [
    'whole process ÷ bare proxy',
    ...columns.map((c) => {
      const floor = columns.find(
        (f) => f.label.startsWith('floor') && f.label.endsWith(c.label.split(' ')[1]!),
      )
      if (!floor) return ''
      return `${(median(c.runs.map((m) => m.allUs)) / median(floor.runs.map((m) => m.allUs))).toFixed(2)}×`
    }),
  ]
  rows.push(ratio)
  const widths = head.map((_, i) => Math.max(...[head, ...rows].map((r) => (r[i] ?? '').length)))
  const line = (r: string[]) =>
    r.length === 0
      ? ''
      : r.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ')
  console.log(line(head))
  console.log(widths.map((w) => '-'.repeat(w)).join('  '))
  for (const r of rows) console.log(line(r))
}

function printTop(columns: Column[], n: number): void {
  for (const c of columns) {
    const m = c.runs[0]!
    console.log(`\n${c.label}: the ${n} costliest functions (self, µs per request, first round)`)
    const top = [...m.split.functions].sort((a, b) => b[1] - a[1]).slice(0, n)
    for (const [name, share] of top) console.log(`  ${(share * m.mainUs).toFixed(1).padStart(6)}  ${name}`)
  }
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-stages-'))
  try {
    const config = join(dir, 'gateway.json')
    await writeFile(config, JSON.stringify({ providers: { openai: { kind: 'openai-compat' } } }))
    const upPort = await freePort()
    const up = spawnNode('bench/fake-upstream.ts', { PORT: String(upPort) }, false)
    const upstream = `http://127.0.0.1:${upPort}`
    await waitFor(`${upstream}/`, up)
    const start = async (entry: string): Promise<Target> => {
      const [name, spec = entry] = entry.includes('=') ? entry.split('=') : [entry]
      const [store, checkout] = spec.split('@')
      const port = await freePort()
      const proc =
        store === 'floor'
          ? spawnNode('bench/floor-proxy.ts', { PORT: String(port), UPSTREAM_ORIGIN: upstream }, true)
          : spawnNode(
              'src/server.ts',
              {
                PORT: String(port),
                HOST: '127.0.0.1',
                GATEWAY_FILES_DIR: join(dir, `${name}-files`),
                GATEWAY_DATABASE_URL: store === 'memory' ? 'memory' : `sqlite:${join(dir, `${name}.db`)}`,
                LOG_LEVEL: process.env['BENCH_LOG_LEVEL'] ?? 'info',
                OPENAI_API_KEY: 'sk-bench-not-a-real-key',
                OPENAI_BASE_URL: `${upstream}/v1`,
                NODE_ENV: 'development',
                GATEWAY_CONFIG: config,
              },
              true,
              checkout,
            )
      const origin = `http://127.0.0.1:${port}`
      await waitFor(store === 'floor' ? `${origin}/` : `${origin}/healthz`, proc)
      return { name: name!, origin, proc }
    }
    const targets: Target[] = []
    for (const name of settings.targets) targets.push(await start(name))
    console.log(
      `Junction per-stage CPU: node ${process.versions.node}; ${settings.requests} blocking and ` +
        `${settings.streams} streamed (100-chunk) requests per target and round, ${settings.connections} ` +
        `connections (autocannon), ${settings.rounds} round(s), sampling every ${settings.intervalUs} µs; medians of the rounds`,
    )
    const columns: Column[] = []
    for (const kind of settings.kinds)
      for (const t of targets) columns.push({ label: `${t.name} ${kind}`, runs: [] })
    for (let round = 0; round < settings.rounds; round++) {
      for (const kind of settings.kinds) {
        const order = round % 2 === 0 ? targets : [...targets].reverse()
        for (const t of order) {
          process.stderr.write(`· round ${round + 1}: ${t.name} ${kind}\n`)
          const m = await measure(t, kind, dir, round)
          columns.find((c) => c.label === `${t.name} ${kind}`)!.runs.push(m)
        }
      }
    }
    console.log('')
    printTable(columns)
    if (settings.top > 0) printTop(columns, settings.top)
  } finally {
    for (const c of children) if (c.exitCode === null) c.kill('SIGTERM')
    await Promise.all(
      children.map((c) => (c.exitCode === null && c.signalCode === null ? once(c, 'exit') : undefined)),
    )
    await rm(dir, { recursive: true, force: true })
  }
}

await main()

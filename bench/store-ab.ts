import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { request } from 'undici'
import { freePort } from './free-port.ts'
import { cpuSeconds } from './proc-stat.ts'

// A/B of the state backends in one run: the gateway on memory and on a SQLite file (and on
// PostgreSQL when BENCH_PG_URL names a database), against one fake upstream, saturated in turn by
// autocannon (its own process) for BENCH_AB_SECONDS (5) each, BENCH_AB_ROUNDS (6) rounds, the order
// alternating. On a shared machine one run is noise: the medians and the per-round ratio are what to
// read. Prints req/s, p50, p99 and the gateway's CPU µs per request.
// BENCH_AB_VARIANTS adds SQLite gateways started with extra environment (see below).
//   node bench/store-ab.ts

const root = fileURLToPath(new URL('..', import.meta.url))
const seconds = Number(process.env['BENCH_AB_SECONDS'] ?? 5)
const rounds = Number(process.env['BENCH_AB_ROUNDS'] ?? 6)
const connections = Number(process.env['BENCH_CONNECTIONS'] ?? 50)
const pgUrl = process.env['BENCH_PG_URL']
const body = JSON.stringify({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] })
const children: ChildProcess[] = []
const elu = new Map<string, string>()

async function waitFor(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
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

async function start(script: string, env: Record<string, string>): Promise<{ origin: string; pid: number }> {
  const port = await freePort()
  // ROOT in a variant's environment: another checkout's gateway (main, to compare against).
  const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', script], {
    cwd: env['ROOT'] ?? root,
    env: { PATH: process.env.PATH ?? '', ...env, PORT: String(port), HOST: '127.0.0.1' },
    stdio: ['ignore', 'ignore', process.env['DBG_ELU'] ? 'pipe' : 'inherit'],
  })
  children.push(proc)
  proc.stderr?.on('data', (b: Buffer) => {
    for (const l of b.toString().split('\n'))
      if (l.startsWith('ELU')) elu.set(env['GATEWAY_DATABASE_URL']!.slice(0, 6), l)
  })
  const origin = `http://127.0.0.1:${port}`
  await waitFor(`${origin}/healthz`)
  return { origin, pid: proc.pid! }
}

interface Run {
  rps: number
  p50: number
  p99: number
  cpuUs: number
  bad: number
}

async function saturate(origin: string, pid: number, s: number): Promise<Run> {
  const cpu0 = await cpuSeconds(pid)
  const { stdout } = await promisify(execFile)(
    join(root, 'node_modules/.bin/autocannon'),
    [
      '-j',
      '-c',
      String(connections),
      '-d',
      String(s),
      '-m',
      'POST',
      '-H',
      'authorization=Bearer sk-dev',
      '-H',
      'content-type=application/json',
      '-b',
      body,
      `${origin}/v1/chat/completions`,
    ],
    { maxBuffer: 1 << 24 },
  )
  const cpu = (await cpuSeconds(pid)) - cpu0
  const r = JSON.parse(stdout) as {
    requests: { average: number; total: number }
    latency: { p50: number; p99: number }
    non2xx: number
    errors: number
  }
  return {
    rps: r.requests.average,
    p50: r.latency.p50,
    p99: r.latency.p99,
    cpuUs: (cpu * 1e6) / Math.max(1, r.requests.total),
    bad: r.non2xx + r.errors,
  }
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-ab-'))
  try {
    const config = join(dir, 'gateway.json')
    // BENCH_AB_LIMITS=1: every account has requests- and tokens-per-minute limits (never reached).
    const limits =
      process.env['BENCH_AB_LIMITS'] === '1'
        ? { limits: { rateLimits: { requestsPerMinute: 1e9, tokensPerMinute: 1e12 } } }
        : {}
    await writeFile(config, JSON.stringify({ providers: { openai: { kind: 'openai-compat' } }, ...limits }))
    const upPort = await freePort()
    const up = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', 'bench/fake-upstream.ts'], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', PORT: String(upPort) },
      stdio: 'ignore',
    })
    children.push(up)
    await waitFor(`http://127.0.0.1:${upPort}/`).catch(() => undefined)
    const gw = (name: string, db: string, extra: Record<string, string> = {}) =>
      start('src/server.ts', {
        GATEWAY_FILES_DIR: join(dir, `${name}-files`),
        GATEWAY_DATABASE_URL: db,
        LOG_LEVEL: process.env['BENCH_LOG_LEVEL'] ?? 'info',
        OPENAI_API_KEY: 'sk-bench-not-a-real-key',
        OPENAI_BASE_URL: `http://127.0.0.1:${upPort}/v1`,
        NODE_ENV: 'development',
        GATEWAY_CONFIG: config,
        DBG_ELU: process.env['DBG_ELU'] ?? '',
        ...extra,
      }).then((t) => ({ name, ...t }))
    const targets = [await gw('memory', 'memory'), await gw('sqlite', `sqlite:${join(dir, 'junction.db')}`)]
    if (pgUrl) targets.push(await gw('postgres', pgUrl))
    // BENCH_AB_VARIANTS: more SQLite gateways with extra environment, `name:K=V,K=V;name2:K=V` (ROOT=dir:
    // the gateway of another checkout).
    for (const v of (process.env['BENCH_AB_VARIANTS'] ?? '').split(';').filter(Boolean)) {
      const [name, vars] = v.split(':') as [string, string]
      const extra = Object.fromEntries(
        (vars ?? '')
          .split(',')
          .filter(Boolean)
          .map((kv) => kv.split('=')),
      )
      targets.push(await gw(name, `sqlite:${join(dir, `${name}.db`)}`, extra))
    }
    for (const t of targets) await saturate(t.origin, t.pid, 2)
    const runs = new Map<string, Run[]>(targets.map((t) => [t.name, []]))
    for (let i = 0; i < rounds; i++) {
      const order = i % 2 === 0 ? targets : [...targets].reverse()
      for (const t of order) {
        const r = await saturate(t.origin, t.pid, seconds)
        runs.get(t.name)!.push(r)
        if (process.env['DBG_ELU']) console.log([...elu].join(' '))
        console.log(
          `round ${i + 1} ${t.name.padEnd(8)} ${r.rps.toFixed(0).padStart(6)} req/s  p50 ${r.p50} ms  p99 ${r.p99} ms  CPU ${r.cpuUs.toFixed(0)} µs/req${r.bad ? `  failures ${r.bad}` : ''}`,
        )
      }
    }
    const mem = runs.get('memory')!
    console.log('\nmedians over rounds:')
    for (const [name, rs] of runs) {
      const ratios = rs.map((r, i) => r.rps / mem[i]!.rps)
      console.log(
        `${name.padEnd(8)} ${median(rs.map((r) => r.rps))
          .toFixed(0)
          .padStart(
            6,
          )} req/s  p50 ${median(rs.map((r) => r.p50))} ms  p99 ${median(rs.map((r) => r.p99))} ms  CPU ${median(rs.map((r) => r.cpuUs)).toFixed(0)} µs/req  ÷memory ${median(ratios).toFixed(2)}×`,
      )
    }
  } finally {
    for (const c of children) c.kill('SIGTERM')
    await Promise.all(children.map((c) => (c.exitCode === null ? once(c, 'exit') : undefined)))
    await rm(dir, { recursive: true, force: true })
  }
}

await main()

import { spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'
import type * as AppModule from '../src/app.ts'
import type * as ConfigModule from '../src/config.ts'
import type * as DepsModule from '../src/deps.ts'

// One blocking chat completion's way through the gateway in one process, for a profile: the gateway
// of a checkout (this one, or BENCH_CHECKOUT=DIR) is built here with the bench's config (one
// OpenAI-compatible provider, the memory store or BENCH_STORE=sqlite), listens on a port, and this
// process's own undici client sends BENCH_REQUESTS requests over real sockets, BENCH_CONCURRENCY (4)
// at a time, to the bench's fake upstream (its own process). It prints µs of wall and CPU time per
// request (client included) on stderr; stdout is the gateway's log:
//   node --cpu-prof --cpu-prof-interval 100 bench/blocking-cost.ts >/dev/null
// Not a count to compare under callgrind: the gateway's timers (log flushes, sweeps, V8's
// memory reducer) fire by wall time, and two runs of one checkout (BENCH_REQUESTS 200 and 1200) differed
// by 0.6 M instructions a request. bench/hot-cost.ts counts pieces without I/O instead.

const here = fileURLToPath(new URL('..', import.meta.url))
const checkout = resolve(process.env['BENCH_CHECKOUT'] ?? here)
const count = Number(process.env['BENCH_REQUESTS'] ?? 2000)
const concurrency = Number(process.env['BENCH_CONCURRENCY'] ?? 4)
const store = process.env['BENCH_STORE'] ?? 'memory'
const warmup = Number(process.env['BENCH_WARMUP'] ?? 300)

const freePort = (): Promise<number> =>
  new Promise((ok, fail) => {
    const s = createServer()
    s.once('error', fail)
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port
      s.close(() => ok(port))
    })
  })

const dir = await mkdtemp(join(tmpdir(), 'junction-blocking-'))
const upPort = await freePort()
const up = spawn(
  process.execPath,
  ['--disable-warning=ExperimentalWarning', join(here, 'bench/fake-upstream.ts')],
  {
    env: { PATH: process.env.PATH ?? '', PORT: String(upPort) },
    stdio: 'ignore',
  },
)
try {
  const upstream = `http://127.0.0.1:${upPort}`
  for (let i = 0; ; i++) {
    try {
      await fetch(`${upstream}/`)
      break
    } catch {
      if (i > 200) throw new Error('the fake upstream never answered')
      await sleep(50)
    }
  }
  const configPath = join(dir, 'gateway.json')
  await writeFile(configPath, JSON.stringify({ providers: { openai: { kind: 'openai-compat' } } }))
  const { loadConfig } = (await import(join(checkout, 'src/config.ts'))) as typeof ConfigModule
  const { createDeps } = (await import(join(checkout, 'src/deps.ts'))) as typeof DepsModule
  const { buildApp } = (await import(join(checkout, 'src/app.ts'))) as typeof AppModule
  const config = loadConfig({
    HOST: '127.0.0.1',
    PORT: '0',
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_DATABASE_URL: store === 'memory' ? 'memory' : `sqlite:${join(dir, 'gateway.db')}`,
    LOG_LEVEL: process.env['BENCH_LOG_LEVEL'] ?? 'info',
    OPENAI_API_KEY: 'sk-bench-not-a-real-key',
    OPENAI_BASE_URL: `${upstream}/v1`,
    NODE_ENV: 'development',
    GATEWAY_CONFIG: configPath,
  })
  // The gateway's own logger writes its lines to this process's stdout: send it to /dev/null.
  const deps = await createDeps(config)
  const app = await buildApp(deps)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`
  const pool = new Pool(origin, { connections: concurrency, pipelining: 1 })
  const body = JSON.stringify({ model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'hello' }] })
  let answered = 0
  const one = async (): Promise<void> => {
    const r = await pool.request({
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
      body,
    })
    const text = await r.body.text()
    if (r.statusCode !== 200) throw new Error(`${r.statusCode}: ${text}`)
    answered++
  }
  const run = async (n: number): Promise<void> => {
    let next = 0
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < n) await one()
      }),
    )
  }
  await run(warmup)
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  await run(count)
  const ms = performance.now() - t0
  const cpu = process.cpuUsage(cpu0)
  console.error(
    `${store}, ${count} requests (${answered} answered): ${((ms * 1000) / count).toFixed(1)} µs wall, ` +
      `${((cpu.user + cpu.system) / count).toFixed(1)} µs CPU per request (client included)`,
  )
  await pool.close()
  await app.close()
  await deps.close()
} finally {
  up.kill()
  await rm(dir, { recursive: true, force: true })
}

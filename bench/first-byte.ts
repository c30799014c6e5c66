import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { Client, request } from 'undici'
import { freePort } from './free-port.ts'
import { createThrowawayDatabase, type ThrowawayDatabase } from './throwaway-database.ts'

// Where a streamed request's first byte waits: one request at a time (as `npm run bench` times the
// first byte), the gateway's moments from bench/first-byte-probe.ts, medians in µs since the request
// reached the gateway. Each store in turn, against the bench's fake upstream; the fake upstream's own
// first byte, timed from here, is the floor.
//   node bench/first-byte.ts    (BENCH_FIRST_BYTE_TARGETS=floor,memory,sqlite,postgres; BENCH_STREAMS=300; BENCH_LIMITS=1)
// A target `name=store@DIR` runs the gateway of another checkout (a change's parent) in the same run;
// `floor` is the bare proxy (bench/floor-proxy.ts: Fastify and undici too, so the same moments);
// `postgres`, the gateway on a throwaway database of the local server (BENCH_PG_URL, dropped after).

const root = new URL('..', import.meta.url).pathname
const targets = (process.env['BENCH_FIRST_BYTE_TARGETS'] ?? 'floor,memory,sqlite').split(',').map((spec) => {
  const [name, rest] = spec.includes('=') ? (spec.split('=') as [string, string]) : [spec, spec]
  const [store, dir] = rest.split('@') as [string, string | undefined]
  return { name, store, cwd: dir ?? root }
})
const streams = Number(process.env['BENCH_STREAMS'] ?? 300)
const warmup = 300
const headers = { authorization: 'Bearer sk-dev', 'content-type': 'application/json' }
const body = JSON.stringify({
  model: 'openai/gpt-4o-mini',
  messages: [{ role: 'user', content: 'hello' }],
  stream: true,
})

const children: ChildProcess[] = []

function start(script: string, env: Record<string, string>, probe: boolean, cwd = root): ChildProcess {
  const probeArgs = probe ? ['--import', join(root, 'bench/first-byte-probe.ts')] : []
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', ...probeArgs, script], {
    cwd,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'ignore', 'inherit', ...(probe ? (['ipc'] as const) : [])],
  })
  children.push(child)
  return child
}

async function ready(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      const res = await request(url, { headersTimeout: 1_000, bodyTimeout: 1_000 })
      await res.body.dump()
      return
    } catch {
      await sleep(100)
    }
  }
  throw new Error(`${url} did not answer`)
}

/** Client-side first and last byte of one stream, ms. */
async function timeStream(client: Client, path: string): Promise<{ first: number; last: number }> {
  const t0 = performance.now()
  const res = await client.request({ method: 'POST', path, headers, body, headersTimeout: 5_000 })
  let first = 0
  for await (const _chunk of res.body) if (first === 0) first = performance.now()
  if (res.statusCode !== 200) throw new Error(`stream answered ${res.statusCode}`)
  return { first: first - t0, last: performance.now() - t0 }
}

async function series(origin: string, path: string): Promise<{ first: number; last: number }> {
  const client = new Client(origin, { keepAliveTimeout: 30_000 })
  try {
    for (let i = 0; i < warmup; i++) await timeStream(client, path)
    const first: number[] = []
    const last: number[] = []
    for (let i = 0; i < streams; i++) {
      const t = await timeStream(client, path)
      first.push(t.first)
      last.push(t.last)
    }
    return { first: median(first), last: median(last) }
  } finally {
    await client.close()
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)] ?? Number.NaN
}

type Timeline = Record<string, number | undefined>

function readTimelines(child: ChildProcess): Promise<Timeline[]> {
  return new Promise((resolve) => {
    const onMessage = (m: { firstByte?: string; timelines?: Timeline[] }) => {
      if (m?.firstByte !== 'read') return
      child.off('message', onMessage)
      resolve(m.timelines ?? [])
    }
    child.on('message', onMessage)
    child.send({ firstByte: 'read' })
  })
}

const marks: [string, string][] = [
  ['handler', 'request in → route handler (auth, admission before the body, body parse)'],
  ['upstreamCreated', '→ upstream request made (routing, hold, request build)'],
  ['upstreamHeadersSent', '→ upstream request written'],
  ['upstreamHeaders', "→ upstream's answer headers"],
  ['firstWrite', "→ client's first write (first chunk relayed)"],
  ['upstreamDone', "→ upstream's answer ended"],
  ['finish', '→ answer finished (settled, [DONE] written)'],
]

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-first-byte-'))
  const databases: ThrowawayDatabase[] = []
  try {
    const upstreamPort = await freePort()
    start('bench/fake-upstream.ts', { PORT: String(upstreamPort) }, false)
    const upstream = `http://127.0.0.1:${upstreamPort}`
    await ready(`${upstream}/`)
    const config = join(dir, 'gateway.json')
    // BENCH_LIMITS=1: every account under a requests and a tokens limit (never reached).
    const limits =
      process.env['BENCH_LIMITS'] === '1'
        ? { limits: { rateLimits: { requestsPerMinute: 1_000_000_000, tokensPerMinute: 1_000_000_000_000 } } }
        : {}
    await writeFile(config, JSON.stringify({ providers: { openai: { kind: 'openai-compat' } }, ...limits }))
    const floor = await series(upstream, '/v1/chat/completions')
    const rows: Record<string, string[]> = {}
    const add = (label: string, value: string) => (rows[label] ??= []).push(value)
    for (const { name, store, cwd } of targets) {
      const port = await freePort()
      if (store === 'postgres') databases.push(await createThrowawayDatabase())
      const databaseUrl =
        store === 'memory'
          ? 'memory'
          : store === 'postgres'
            ? databases.at(-1)!.url
            : `sqlite:${join(dir, `${name}.db`)}`
      const cache = join(dir, `compile-cache-${name}`)
      const gateway =
        store === 'floor'
          ? start(
              'bench/floor-proxy.ts',
              { PORT: String(port), UPSTREAM_ORIGIN: upstream, NODE_COMPILE_CACHE: cache },
              true,
              cwd,
            )
          : start(
              'src/start.mjs',
              {
                GATEWAY_DATABASE_URL: databaseUrl,
                GATEWAY_FILES_DIR: join(dir, `${name}-files`),
                GATEWAY_CONFIG: config,
                NODE_COMPILE_CACHE: cache,
                OPENAI_API_KEY: 'sk-bench-not-a-real-key',
                OPENAI_BASE_URL: `${upstream}/v1`,
                NODE_ENV: 'development',
                LOG_LEVEL: 'info',
                PORT: String(port),
                HOST: '127.0.0.1',
              },
              true,
              cwd,
            )
      const origin = `http://127.0.0.1:${port}`
      await ready(store === 'floor' ? `${origin}/` : `${origin}/healthz`)
      await readTimelines(gateway)
      const client = await series(origin, '/v1/chat/completions')
      const timelines = (await readTimelines(gateway)).slice(-streams)
      let previous = 0
      for (const [key, label] of marks) {
        const at = median(timelines.map((t) => t[key] ?? Number.NaN).filter((v) => !Number.isNaN(v)))
        add(label, `${at.toFixed(0).padStart(6)} (+${(at - previous).toFixed(0)})`)
        previous = at
      }
      add(
        "client's first byte, ms (added to the upstream's)",
        `${client.first.toFixed(3)} (+${(client.first - floor.first).toFixed(3)})`,
      )
      add(
        "client's last byte, ms (added)",
        `${client.last.toFixed(3)} (+${(client.last - floor.last).toFixed(3)})`,
      )
      gateway.kill('SIGTERM')
      await once(gateway, 'exit')
    }
    console.log(
      `Junction: a stream's way to its first byte, ${streams} sequential 100-chunk streams after ${warmup} ` +
        `of warm-up, medians. Gateway moments in µs since the request reached it (+ since the one above).` +
        ` The upstream alone: first byte ${floor.first.toFixed(3)} ms, last ${floor.last.toFixed(3)} ms.`,
    )
    const width = Math.max(...Object.keys(rows).map((l) => l.length))
    console.log(`${''.padEnd(width)}  ${targets.map((t) => t.name.padStart(18)).join('')}`)
    for (const [label, values] of Object.entries(rows))
      console.log(`${label.padEnd(width)}  ${values.map((v) => v.padStart(18)).join('')}`)
  } finally {
    for (const child of children) child.kill('SIGKILL')
    await Promise.all(children.map((child) => (child.exitCode === null ? once(child, 'exit') : undefined)))
    for (const database of databases) await database.drop()
    await rm(dir, { recursive: true, force: true })
  }
}

await main()

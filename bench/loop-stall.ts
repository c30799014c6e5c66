import { fork } from 'node:child_process'
import { once } from 'node:events'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { request } from 'undici'

// `node bench/loop-stall.ts`: the longest stall of the gateway's event loop while it handles one heavy
// request, per case. The gateway (memory store, development account, built-in mock provider, logs off)
// runs in a child process started from this file, so building and sending the bodies costs it nothing;
// the child watches its own loop with monitorEventLoopDelay (wall clock) and with the thread's CPU time
// between ticks of a 1 ms timer, and reports the longest of each on request.
// Each case runs BENCH_STALL_RUNS times (default 3); the table shows the worst and the median run.
// It records figures and asserts nothing. The body limit is the shipped default (10 MiB).

const RUNS = Number(process.env['BENCH_STALL_RUNS'] ?? 3)
const BODY_LIMIT = 10 * 1024 * 1024

type Body = Record<string, unknown>

interface Case {
  name: string
  path: string
  body: () => Body
}

/** Words of ordinary text, `bytes` long. */
function prose(bytes: number): string {
  const words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog,', 'and', 'that', 'is', 'all.']
  const out: string[] = []
  let length = 0
  for (let i = 0; length < bytes; i++) {
    const w = words[i % words.length]!
    out.push(w)
    length += w.length + 1
  }
  return out.join(' ').slice(0, bytes)
}

/** Fills an array with copies of `item` until its JSON is close to `bytes`. */
function fill(item: unknown, bytes: number, max = Infinity): unknown[] {
  const size = JSON.stringify(item).length + 1
  return Array.from({ length: Math.min(max, Math.floor(bytes / size)) }, () => item)
}

function wideObject(keys: number, value: unknown = 1): Record<string, unknown> {
  const o: Record<string, unknown> = {}
  for (let i = 0; i < keys; i++) o[`k${i}`] = value
  return o
}

const chat = (extra: Body): Body => ({
  model: 'mock/chat',
  messages: [{ role: 'user', content: 'hi' }],
  ...extra,
})
const room = BODY_LIMIT - 4096

const cases: Case[] = [
  // What the machine itself gives: the stall while serving a small request (scheduling, GC).
  { name: 'baseline: a small request', path: '/v1/chat/completions', body: () => chat({}) },
  {
    name: '9.9 MB single message',
    path: '/v1/chat/completions',
    body: () => chat({ messages: [{ role: 'user', content: prose(9_900_000) }] }),
  },
  {
    name: '9.9 MB single message, streamed',
    path: '/v1/chat/completions',
    body: () => chat({ messages: [{ role: 'user', content: prose(9_900_000) }], stream: true }),
  },
  {
    name: '9.9 MB random letters, one word',
    path: '/v1/chat/completions',
    body: () => chat({ messages: [{ role: 'user', content: 'qzxv'.repeat(2_475_000) }] }),
  },
  {
    name: '600 000-key metadata',
    path: '/v1/chat/completions',
    body: () => chat({ metadata: wideObject(600_000) }),
  },
  {
    name: '600 000-key unknown field',
    path: '/v1/chat/completions',
    body: () => chat({ extra: wideObject(600_000, 'v') }),
  },
  {
    name: '100 000 tool_calls',
    path: '/v1/chat/completions',
    body: () =>
      chat({
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            tool_calls: Array.from({ length: 100_000 }, (_, i) => ({
              id: `call_${i}`,
              type: 'function',
              function: { name: 'f', arguments: '{}' },
            })),
          },
        ],
      }),
  },
  {
    name: '100 000 tools',
    path: '/v1/chat/completions',
    body: () =>
      chat({
        tools: Array.from({ length: 100_000 }, (_, i) => ({
          type: 'function',
          function: { name: `f${i}`, parameters: { type: 'object' } },
        })),
      }),
  },
  {
    name: '1 000 000 empty objects in a field',
    path: '/v1/chat/completions',
    body: () => chat({ extra: fill({}, room) }),
  },
  {
    name: '3 000 000 numbers (embeddings tokens)',
    path: '/routed/v1/embeddings',
    body: () => ({ model: 'mock/embed', input: fill(1, room, 3_000_000) }),
  },
  {
    name: '300 000 messages',
    path: '/v1/chat/completions',
    body: () => chat({ messages: fill({ role: 'user', content: 'hi' }, room) }),
  },
  {
    name: '300 000 content parts',
    path: '/v1/chat/completions',
    body: () => chat({ messages: [{ role: 'user', content: fill({ type: 'text', text: 'hi' }, room) }] }),
  },
  // The widest requests still accepted after the caps (docs/clients/chat.md, request caps): each must also stay under 50 ms.
  {
    name: 'at the caps: 10 000 messages of 1 KB',
    path: '/v1/chat/completions',
    body: () => chat({ messages: fill({ role: 'user', content: prose(1000) }, room, 10_000) }),
  },
  {
    name: 'at the caps: 10 000 tool calls, 10 000 parts, 1 024 tools',
    path: '/v1/chat/completions',
    body: () =>
      chat({
        messages: [
          { role: 'user', content: Array(10_000).fill({ type: 'text', text: prose(200) }) },
          {
            role: 'assistant',
            tool_calls: Array.from({ length: 10_000 }, (_, i) => ({
              id: `call_${i}`,
              type: 'function',
              function: { name: 'f', arguments: JSON.stringify({ q: prose(100) }) },
            })),
          },
          { role: 'tool', tool_call_id: 'call_0', content: 'ok' },
        ],
        tools: Array.from({ length: 1024 }, (_, i) => ({
          type: 'function',
          function: { name: `f${i}`, description: prose(2000), parameters: { type: 'object' } },
        })),
      }),
  },
  {
    name: 'at the caps: 1 024 tools, 90 000 objects of schema',
    path: '/v1/chat/completions',
    body: () =>
      chat({
        tool_choice: 'required',
        tools: Array.from({ length: 1024 }, (_, i) => ({
          type: 'function',
          function: {
            name: `f${i}`,
            parameters: {
              type: 'object',
              properties: wideObject(84, { type: 'string', description: prose(50) }),
              required: Object.keys(wideObject(84)),
            },
          },
        })),
      }),
  },
  {
    name: 'at the caps: 2 048 embedding inputs of 4.8 KB',
    path: '/routed/v1/embeddings',
    body: () => ({ model: 'mock/embed', input: fill(prose(4800), room, 2048) }),
  },
  {
    name: 'at the caps: 300 000 embedding tokens',
    path: '/routed/v1/embeddings',
    body: () => ({ model: 'mock/embed', input: Array.from({ length: 300_000 }, (_, i) => i % 50_000) }),
  },
]

// ---------------------------------------------------------------------------------------------
// The gateway's side

async function serve(): Promise<void> {
  const { loadConfig } = await import('../src/config.ts')
  const { createDeps } = await import('../src/deps.ts')
  const { buildApp } = await import('../src/app.ts')
  const { loadCounter } = await import('../src/billing/tokens.ts')
  const config = loadConfig({ NODE_ENV: 'test', GATEWAY_DATABASE_URL: 'memory', LOG_LEVEL: 'silent' })
  const deps = await createDeps(config)
  await loadCounter()
  const app = await buildApp(deps)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  const histogram = monitorEventLoopDelay({ resolution: 5 })
  histogram.enable()
  // The same stall in CPU time of this thread: what the loop itself spent between two ticks of a 1 ms
  // timer. Unlike the wall clock, it leaves out the time other processes had the CPU (a shared machine).
  const cpuMs = (): number => {
    const { user, system } = process.threadCpuUsage()
    return (user + system) / 1000
  }
  let lastCpu = cpuMs()
  let maxCpu = 0
  setInterval(() => {
    const now = cpuMs()
    maxCpu = Math.max(maxCpu, now - lastCpu)
    lastCpu = now
  }, 1)
  // The measuring side is gone (done, or failed): so is this.
  process.on('disconnect', () => process.exit(0))
  process.on('message', (m: string) => {
    if (m === 'reset') {
      histogram.reset()
      lastCpu = cpuMs()
      maxCpu = 0
      process.send!({ reset: true })
    } else if (m === 'report') {
      process.send!({ maxMs: histogram.max / 1e6, maxCpuMs: maxCpu })
    } else if (m === 'exit') {
      void app
        .close()
        .then(() => deps.close())
        .then(() => process.exit(0))
    }
  })
  process.send!({ port })
}

// ---------------------------------------------------------------------------------------------
// The measuring side

async function measure(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ['serve'], {
    execArgv: [
      '--disable-warning=ExperimentalWarning',
      ...(process.env['BENCH_CHILD_FLAGS'] ?? '').split(' ').filter(Boolean),
    ],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  const next = async (): Promise<Record<string, number>> => (await once(child, 'message'))[0] as never
  const { port } = await next()
  const ask = async (m: string): Promise<Record<string, number>> => {
    const answer = next()
    child.send(m)
    return answer
  }
  const origin = `http://127.0.0.1:${port}`
  const only = process.argv[2]
  console.log(`case | status | longest stall, wall ms: worst of ${RUNS}, median | in CPU ms: worst, median`)
  for (const c of cases) {
    if (only !== undefined && !c.name.includes(only)) continue
    const body = Buffer.from(JSON.stringify(c.body()))
    if (body.length > BODY_LIMIT) throw new Error(`${c.name}: ${body.length} bytes is over the body limit`)
    const stalls: number[] = []
    const cpuStalls: number[] = []
    let status = 0
    for (let run = 0; run < RUNS; run++) {
      await sleep(200)
      await ask('reset')
      const res = await request(origin + c.path, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
        body,
      })
      status = res.statusCode
      await res.body.text()
      // Work left after the answer (settling, logging) counts too.
      await sleep(100)
      const report = await ask('report')
      stalls.push(report.maxMs!)
      cpuStalls.push(report.maxCpuMs!)
    }
    stalls.sort((a, b) => a - b)
    cpuStalls.sort((a, b) => a - b)
    const mb = (body.length / 1e6).toFixed(1)
    console.log(
      `${c.name} (${mb} MB) | ${status} | ${stalls.at(-1)!.toFixed(0)}, ${stalls[stalls.length >> 1]!.toFixed(0)}` +
        ` | ${cpuStalls.at(-1)!.toFixed(0)}, ${cpuStalls[cpuStalls.length >> 1]!.toFixed(0)}`,
    )
  }
  child.send('exit')
  await once(child, 'exit')
}

if (process.argv[2] === 'serve') await serve()
else await measure()

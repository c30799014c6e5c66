import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

// One account's webhooks and tasks against another's (issue 24, point 3): the latency of account b's
// webhook while 48 of account a's receivers hang, and of b's 3 s task while 20 of a's tasks poll a Veo
// upstream that never answers a poll. It records a figure and asserts nothing.
//
//   node bench/fairness.ts <webhooks|tasks> <loaded|unloaded> [checkout, default this one]
//
// The gateway runs as `src/server.ts` of the checkout (so an older checkout gives the before figure),
// on a SQLite file in a temporary directory; receivers and the Veo fake are on 127.0.0.1.

const [scenario, mode, checkout = resolve(import.meta.dirname, '..')] = process.argv.slice(2)
if ((scenario !== 'webhooks' && scenario !== 'tasks') || (mode !== 'loaded' && mode !== 'unloaded')) {
  console.error('usage: node bench/fairness.ts <webhooks|tasks> <loaded|unloaded> [checkout]')
  process.exit(2)
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void
async function listen(handler: Handler): Promise<{ server: Server; origin: string }> {
  const server = createServer(handler)
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }
}

let hangingReceived = 0
let fastAt = 0
const hanging = await listen((req) => {
  hangingReceived++
  req.resume()
})
const fast = await listen((req, res) => {
  req.resume()
  req.on('end', () => {
    fastAt = Date.now()
    res.end('ok')
  })
})
let operations = 0
const veo = await listen((req, res) => {
  req.resume()
  req.on('end', () => {
    // A create gets an operation; a poll of it is never answered.
    if (req.method !== 'POST') return
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ name: `models/veo-3.1-generate-preview/operations/op${operations++}` }))
  })
})

const dir = mkdtempSync(join(tmpdir(), 'junction-fairness-'))
const port = 20_000 + Math.floor(Math.random() * 20_000)
writeFileSync(
  join(dir, 'config.json'),
  JSON.stringify({
    accounts: [
      { id: 'a', keys: ['sk-fairness-aaaa'], credits: 10_000 },
      { id: 'b', keys: ['sk-fairness-bbbb'], credits: 10_000 },
    ],
    predictions: { webhooks: { allowHttp: true, allowedHosts: ['127.0.0.1'] } },
  }),
)
const gateway = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/server.ts'], {
  cwd: checkout,
  env: {
    ...process.env,
    PORT: String(port),
    GATEWAY_CONFIG: join(dir, 'config.json'),
    GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}`,
    GATEWAY_OUTPUTS_DIR: join(dir, 'outputs'),
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GEMINI_API_KEY: 'test-key',
    GEMINI_BASE_URL: veo.origin,
    LOG_LEVEL: 'warn',
  },
  stdio: ['ignore', 'ignore', 'inherit'],
})
const base = `http://127.0.0.1:${port}`
for (let i = 0; ; i++) {
  try {
    if ((await fetch(`${base}/healthz`)).ok) break
  } catch {
    // Not listening yet.
  }
  if (i > 300) throw new Error('the gateway did not start')
  await sleep(100)
}

async function create(key: string, body: unknown): Promise<string> {
  const res = await fetch(`${base}/v1/predictions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  const json = (await res.json()) as { data: { task_id: string } }
  if (!res.ok) throw new Error(JSON.stringify(json))
  return json.data.task_id
}

let ms: number
if (scenario === 'webhooks') {
  if (mode === 'loaded') {
    for (let i = 0; i < 48; i++) {
      await create('sk-fairness-aaaa', {
        model: 'mock/image',
        input: { prompt: `[mock:delay=0] a${i}` },
        webhook: `${hanging.origin}/a${i}`,
      })
    }
    while (hangingReceived < 4) await sleep(50)
  }
  const t0 = Date.now()
  await create('sk-fairness-bbbb', {
    model: 'mock/image',
    input: { prompt: '[mock:delay=0] b' },
    webhook: `${fast.origin}/b`,
  })
  while (fastAt === 0) await sleep(20)
  ms = fastAt - t0
} else {
  if (mode === 'loaded') {
    for (let i = 0; i < 20; i++) {
      await create('sk-fairness-aaaa', {
        model: 'google/veo-3.1-generate-preview',
        input: { prompt: `a${i}`, duration: 4 },
      })
    }
    await sleep(2_500) // submitted; their first polls hang
  }
  const t0 = Date.now()
  const id = await create('sk-fairness-bbbb', {
    model: 'mock/image',
    input: { prompt: '[mock:delay=3000] b' },
  })
  for (;;) {
    const res = await fetch(`${base}/v1/predictions/${id}`, {
      headers: { authorization: 'Bearer sk-fairness-bbbb' },
    })
    const body = (await res.json()) as { data: { task_status: string } }
    if (body.data.task_status !== 'processing') break
    await sleep(20)
  }
  ms = Date.now() - t0
}
console.log(JSON.stringify({ scenario, mode, checkout, victimMs: ms, hangingReceived }))
gateway.kill('SIGKILL')
for (const s of [hanging, fast, veo]) {
  s.server.closeAllConnections()
  s.server.close()
}
rmSync(dir, { recursive: true, force: true })

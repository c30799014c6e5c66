import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

// A connection flood from one address against another account's latency (issue 24, point 3): the
// attacker (its own process, connecting from 127.0.0.2) holds `connections` connections, each
// announcing a 100 KB chat body and sending one byte every 50 ms, and reconnects 200 ms after each is
// cut. The victim (account b, from 127.0.0.1) sends one mock chat request every 50 ms for 15 s; the
// script prints its p50/p95/max. It records figures and asserts nothing.
//
//   node bench/connection-flood.ts <loaded|unloaded> [connections=500] [maxConnectionsPerAddress=0]
//
// The attacker and the gateway share this machine's cores: on 2 cores the attacker's own CPU is part
// of what the victim feels, so compare runs made back to back.

if (process.argv[2] === 'attacker') {
  const port = Number(process.argv[4])
  const attack = async (): Promise<void> => {
    for (;;) {
      await new Promise<void>((done) => {
        const socket = connect({ port, host: '127.0.0.1', localAddress: '127.0.0.2' })
        const trickle = setInterval(() => socket.writable && socket.write('m'), 50)
        socket.on('error', () => {})
        socket.on('close', () => (clearInterval(trickle), done()))
        socket.write(
          'POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nauthorization: Bearer sk-flood-aaaa\r\n' +
            'content-type: application/json\r\ncontent-length: 100000\r\n\r\n{"model":"',
        )
      })
      await sleep(200)
    }
  }
  await Promise.all(Array.from({ length: Number(process.argv[3]) }, attack))
}

const [mode = 'unloaded', connections = '500', perAddress = '0'] = process.argv.slice(2)
const dir = mkdtempSync(join(tmpdir(), 'junction-flood-'))
const port = 20_000 + Math.floor(Math.random() * 20_000)
writeFileSync(
  join(dir, 'config.json'),
  JSON.stringify({
    server: { maxConnectionsPerAddress: Number(perAddress) },
    accounts: [
      { id: 'a', keys: ['sk-flood-aaaa'], credits: 10_000 },
      { id: 'b', keys: ['sk-flood-bbbb'], credits: 10_000 },
    ],
  }),
)
const gateway = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/server.ts'], {
  cwd: resolve(import.meta.dirname, '..'),
  env: {
    ...process.env,
    PORT: String(port),
    GATEWAY_CONFIG: join(dir, 'config.json'),
    GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}`,
    GATEWAY_OUTPUTS_DIR: join(dir, 'outputs'),
    GATEWAY_FILES_DIR: join(dir, 'files'),
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
const attacker =
  mode === 'loaded'
    ? spawn(process.execPath, [process.argv[1]!, 'attacker', connections, String(port)], { stdio: 'inherit' })
    : undefined
await sleep(3_000)
const latencies: number[] = []
const start = Date.now()
while (Date.now() - start < 15_000) {
  const t0 = performance.now()
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-flood-bbbb', 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }),
  })
  await res.text()
  latencies.push(performance.now() - t0)
  await sleep(50)
}
attacker?.kill('SIGKILL')
gateway.kill('SIGKILL')
latencies.sort((x, y) => x - y)
const at = (q: number): string => latencies[Math.floor(q * (latencies.length - 1))]!.toFixed(1)
console.log(
  JSON.stringify({
    mode,
    connections,
    perAddress,
    requests: latencies.length,
    p50: at(0.5),
    p95: at(0.95),
    max: at(1),
  }),
)
rmSync(dir, { recursive: true, force: true })

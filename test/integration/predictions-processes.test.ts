import { createHmac, timingSafeEqual } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest'
import { useTestDatabase } from '../support/postgres.ts'
import { startReceiver, type ReceivedRequest } from '../support/receiver.ts'
import { jsonOf, stopServer, useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// Predictions across processes, as users run them (src/server.ts in child processes, the mock
// provider's media models): a task and a pending webhook survive `kill -9` and a restart; two
// instances on one PostgreSQL share tasks (one polls, any reads and cancels) and deliver each
// webhook attempt once, not once per instance.

const KEY = 'sk-predictions-processes'
const SECRET = `whsec_${Buffer.alloc(32, 3).toString('base64')}`
const auth = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})
const start = useServerProcesses()
const database = useTestDatabase()

function workspace(database: string | null): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'junction-pred-proc-'))
  dirs.push(dir)
  const config = join(dir, 'junction.json')
  writeFileSync(
    config,
    JSON.stringify({
      accounts: [{ id: 'acme', keys: [KEY], credits: 10, webhookSecret: SECRET }],
      predictions: {
        pollIntervalMs: 100,
        maxPollIntervalMs: 200,
        leaseMs: 4000,
        webhooks: {
          allowHttp: true,
          allowedHosts: ['127.0.0.1'],
          schedule: [200],
          maxAttempts: 10,
          timeoutMs: 1000,
        },
      },
    }),
  )
  return {
    GATEWAY_DATABASE_URL: database ?? `sqlite:${join(dir, 'junction.db')}`,
    GATEWAY_OUTPUTS_DIR: join(dir, 'outputs'),
    GATEWAY_FILES_DIR: join(dir, 'files'),
    GATEWAY_CONFIG: config,
    MOCK_TASK_DELAY_MS: '0',
  }
}

const create = (s: ServerProcess, body: unknown) =>
  jsonOf(fetch(`${s.origin}/v1/predictions`, { method: 'POST', headers: auth, body: JSON.stringify(body) }))
const lookup = (s: ServerProcess, id: string) =>
  jsonOf(fetch(`${s.origin}/v1/predictions/${id}`, { headers: auth }))

/** Polls the lookup until the task leaves `processing` (each poll is an event, not a timer guess). */
async function settled(s: ServerProcess, id: string) {
  for (;;) {
    const body = await lookup(s, id)
    if (body.data.task_status !== 'processing') return body
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** The Standard Webhooks check, written here independently of the gateway's signing code. */
function verified(r: ReceivedRequest): boolean {
  const id = String(r.headers['webhook-id'])
  const ts = String(r.headers['webhook-timestamp'])
  const key = Buffer.from(SECRET.slice('whsec_'.length), 'base64')
  const expected = createHmac('sha256', key).update(`${id}.${ts}.${r.body}`).digest()
  return String(r.headers['webhook-signature'])
    .split(' ')
    .some((s) => {
      const [version, sig] = s.split(',')
      const given = Buffer.from(sig ?? '', 'base64')
      return version === 'v1' && given.length === expected.length && timingSafeEqual(given, expected)
    })
}

describe('predictions across processes', () => {
  it('a task in flight and a pending webhook survive kill -9 and a restart', async () => {
    const env = workspace(null)
    let failing = true
    const receiver = await startReceiver((_r, res) => {
      res.writeHead(failing ? 500 : 204).end()
    })
    onTestFinished(() => receiver.close())

    const a = await start(env)
    // One task finishes at once, and its webhook fails; one is still running when the process dies.
    const announced = await create(a, {
      model: 'mock/image',
      input: { prompt: 'announced' },
      webhook: `${receiver.origin}/hook`,
    })
    const running = await create(a, {
      model: 'mock/video-c',
      input: { prompt: '[mock:delay=4000] slow one' },
    })
    await receiver.received(1)
    await stopServer(a, 'SIGKILL')
    failing = false

    const b = await start(env)
    await receiver.received(2)
    const [first, second] = receiver.requests
    expect(first!.headers['webhook-id']).toBe(`msg_${announced.data.task_id}`)
    expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id'])
    expect(second!.body).toBe(first!.body)
    expect(verified(second!)).toBe(true)
    expect(JSON.parse(second!.body).data.task_status).toBe('success')

    const done = await settled(b, running.data.task_id)
    expect(done.data.task_status).toBe('success')
    const video = await fetch(done.data.output[0].video)
    expect(video.status).toBe(200)
    const bytes = Buffer.from(await video.arrayBuffer())
    expect(bytes.subarray(4, 8).toString('latin1')).toBe('ftyp')
    // Charged once each, on whichever process ended them.
    const credits = (await jsonOf(fetch(`${b.origin}/v1/credits`, { headers: auth }))).data
    const costs = await Promise.all(
      [announced, running].map(async (t) => (await settled(b, t.data.task_id)).usage.cost as number),
    )
    expect(Math.round(credits.total_usage * 1e9)).toBe(Math.round((costs[0]! + costs[1]!) * 1e9))
    expect(receiver.requests).toHaveLength(2)
  })

  it('two instances on one PostgreSQL: one polls each task, either reads and cancels it, each webhook attempt is sent once', async () => {
    const { url } = await database()
    const env = workspace(url)
    const receiver = await startReceiver((_r, res, index) => {
      // Fails twice, then accepts.
      res.writeHead(index < 2 ? 503 : 200).end()
    })
    onTestFinished(() => receiver.close())
    const [a, b] = await Promise.all([start(env), start(env)])

    // Created on A, cancelled through B while it runs; A sees it cancelled.
    const slow = await create(a, {
      model: 'mock/video-a',
      input: { prompt: '[mock:delay=60000] long' },
      webhook: `${receiver.origin}/cancelled`,
    })
    const cancel = await jsonOf(
      fetch(`${b.origin}/v1/predictions/${slow.data.task_id}/cancel`, {
        method: 'POST',
        headers: { authorization: auth.authorization },
      }),
    )
    expect(cancel.data.task_status).toBe('cancelled')
    expect((await lookup(a, slow.data.task_id)).data.task_status).toBe('cancelled')

    await receiver.received(3)
    // Once the store says delivered (a final state no sender claims again), nothing more can arrive.
    const db = new pg.Client({ connectionString: url })
    await db.connect()
    onTestFinished(() => db.end())
    for (;;) {
      const { rows } = await db.query<{ status: string; attempts: number }>(
        'SELECT status, attempts FROM webhook_deliveries WHERE task_id = $1',
        [slow.data.task_id],
      )
      if (rows[0]?.status === 'delivered') {
        expect(rows).toEqual([{ status: 'delivered', attempts: 3 }])
        break
      }
      await new Promise((r) => setTimeout(r, 100))
    }
    expect(receiver.requests).toHaveLength(3)
    const ids = new Set(receiver.requests.map((r) => r.headers['webhook-id']))
    expect([...ids]).toEqual([`msg_${slow.data.task_id}`])
    expect(receiver.requests.every(verified)).toBe(true)
    expect(JSON.parse(receiver.requests[2]!.body).data).toEqual({
      task_id: slow.data.task_id,
      task_status: 'cancelled',
    })

    // A task made on B finishes, read on A; exactly one of the two processes ran it.
    const made = await create(b, {
      model: 'mock/speech',
      input: { prompt: 'Two instances, one task.', output_format: 'wav' },
    })
    const done = await settled(a, made.data.task_id)
    expect(done.data.task_status).toBe('success')
    const audio = Buffer.from(await (await fetch(done.data.output[0].audio)).arrayBuffer())
    expect(audio.subarray(0, 4).toString('latin1')).toBe('RIFF')
    expect(audio.subarray(8, 12).toString('latin1')).toBe('WAVE')
    const finishedBy = () =>
      [a, b].filter((s) =>
        s
          .output()
          .split('\n')
          .some((l) => l.includes(made.data.task_id) && l.includes('task finished')),
      )
    // Log lines are written in batches (at most 100 ms late): wait for the line, then count.
    await vi.waitFor(() => expect(finishedBy().length).toBeGreaterThan(0))
    expect(finishedBy()).toHaveLength(1)
  })
})

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished, vi } from 'vitest'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// Task steps are scheduled per account (predictions/runner.ts): account a's tasks on a Veo upstream whose
// polls hang hold at most a's share of the runner's workers, so account b's task runs to its end
// meanwhile. Ordering, not time: b's task must succeed while every poll of a's is still hanging.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const MODEL = 'veo-3.1-generate-preview'
const MP4 = Buffer.concat([
  Buffer.from('\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2', 'latin1'),
  Buffer.alloc(512, 1),
])
const A = { authorization: 'Bearer sk-fair-aaaa-0001' }
const B = { authorization: 'Bearer sk-fair-bbbb-0001' }

/** A Veo upstream: each create gets its own operation; polls of a prompt starting "hang" never answer. */
async function veo(): Promise<{ up: FakeUpstream; hanging: () => number }> {
  let n = 0
  let hanging = 0
  const up = await startFakeUpstream({})
  up.setHandler(`POST /v1beta/models/${MODEL}:predictLongRunning`, (req, res) => {
    const prompt = (req.body as { instances: { prompt: string }[] }).instances[0]!.prompt
    const name = `models/${MODEL}/operations/${prompt.startsWith('hang') ? 'hang' : 'done'}-${n++}`
    up.setHandler(`GET /v1beta/${name}`, (_r, pollRes) => {
      if (prompt.startsWith('hang')) {
        hanging++
        return
      }
      sendJson(pollRes, 200, {
        name,
        done: true,
        response: {
          generateVideoResponse: {
            generatedSamples: [
              { video: { uri: `${up.origin}/v1beta/files/v-${name.split('/').pop()}:download` } },
            ],
          },
        },
      })
    })
    up.setHandler(`GET /v1beta/files/v-${name.split('/').pop()}:download`, (_r, fileRes) => {
      fileRes.writeHead(200, { 'content-type': 'video/mp4' })
      fileRes.end(MP4)
    })
    sendJson(res, 200, { name })
  })
  return { up, hanging: () => hanging }
}

describe('task steps per account', () => {
  it("20 tasks of account a polling an upstream that hangs leave room for account b's task", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-fair-'))
    dirs.push(dir)
    const { up, hanging } = await veo()
    const clock = { t: 1_800_000_000_000 }
    const gw: TestGateway = await startGateway({
      env: { GATEWAY_OUTPUTS_DIR: dir, GEMINI_API_KEY: 'test-key', GEMINI_BASE_URL: up.origin },
      file: {
        accounts: [
          { id: 'acct-a', keys: ['sk-fair-aaaa-0001'], credits: 100 },
          { id: 'acct-b', keys: ['sk-fair-bbbb-0001'], credits: 100 },
        ],
        // A hanging step is cut at 80 % of the lease: long enough that a's polls outlast b's task.
        predictions: {
          leaseMs: 20_000,
          concurrency: 16,
          accountConcurrency: 4,
          webhooks: { timeoutMs: 5_000 },
        },
      },
      overrides: { now: () => clock.t, background: false },
    })
    onTestFinished(async () => {
      await up.close()
      await gw.close()
    })
    const create = async (headers: Record<string, string>, prompt: string): Promise<string> => {
      const res = await gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers,
        payload: { model: `google/${MODEL}`, input: { prompt, duration: 4 } },
      })
      expect(res.statusCode, res.body).toBe(200)
      return res.json().data.task_id as string
    }
    const creates = () => up.requests.filter((r) => r.method === 'POST').length
    const status = async (headers: Record<string, string>, id: string) =>
      (await gw.app.inject({ method: 'GET', url: `/v1/predictions/${id}`, headers })).json().data.task_status

    const runner = gw.deps.runner
    runner.start(20)
    for (let i = 0; i < 20; i++) await create(A, `hang ${i}`)
    await vi.waitFor(() => expect(creates()).toBe(20), { timeout: 20_000 })
    // Every task of a is due for its first poll, and that poll hangs.
    clock.t += 2_000
    await vi.waitFor(() => expect(hanging()).toBeGreaterThanOrEqual(4), { timeout: 20_000 })

    const b = await create(B, 'the victim')
    await vi.waitFor(() => expect(creates()).toBe(21), { timeout: 20_000 })
    clock.t += 2_000
    await vi.waitFor(async () => expect(await status(B, b)).toBe('success'), { timeout: 20_000 })

    // b ran to its end while a held 4 workers, all still hanging: no poll of a's has ended.
    expect(hanging()).toBe(4)
    expect(up.abortedResponses).toBe(0)
    await runner.stop()
  }, 60_000)
})

import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { UpstreamError } from '../../src/errors.ts'
import { submitNotAccepted } from '../../src/predictions/runner.ts'
import { sendJson, startFakeUpstream, type FakeHandler } from '../support/fake-upstream.ts'
import { devAuth, startGateway } from '../support/gateway.ts'

// A media create is sent again only when the upstream cannot have accepted it (refused at connect,
// or a 429). After a timeout or a 5xx the upstream may have started (and will bill) the job, so the
// task fails rather than start a second one. A fake Veo upstream counts the creates.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const MODEL = 'veo-3.1-generate-preview'
const CREATE = `POST /v1beta/models/${MODEL}:predictLongRunning`
const OPERATION = `models/${MODEL}/operations/op-1`

async function setup(create: FakeHandler, baseUrl?: string) {
  const dir = mkdtempSync(join(tmpdir(), 'junction-submit-'))
  dirs.push(dir)
  const up = await startFakeUpstream({ [CREATE]: create })
  up.setHandler(`GET /v1beta/${OPERATION}`, (_req, res) => sendJson(res, 200, { name: OPERATION }))
  const clock = { t: 1_800_000_000_000 }
  const gw = await startGateway({
    env: { GATEWAY_OUTPUTS_DIR: dir, GEMINI_API_KEY: 'test-key', GEMINI_BASE_URL: baseUrl ?? up.origin },
    // A step is cut at 80 % of the lease: 1.6 s for a create that never answers.
    file: { predictions: { leaseMs: 2_000, webhooks: { timeoutMs: 1_000 } } },
    overrides: { now: () => clock.t, background: false },
  })
  onTestFinished(async () => {
    await up.close()
    await gw.close()
  })
  const res = await gw.app.inject({
    method: 'POST',
    url: '/v1/predictions',
    headers: devAuth,
    payload: { model: `google/${MODEL}`, input: { prompt: 'waves', duration: 4 } },
  })
  expect(res.statusCode, res.body).toBe(200)
  const id = res.json().data.task_id as string
  return {
    creates: () => up.requests.filter((r) => r.method === 'POST').length,
    async steps(n: number) {
      for (let i = 0; i < n; i++) {
        clock.t += 60_000
        await gw.deps.runner.runOnce()
      }
    },
    task: () => gw.deps.store.tasks.get(id),
    reserved: async () => (await gw.deps.store.ledger.credits('dev', clock.t)).reserved,
  }
}

describe('media create: resubmitted only when the upstream cannot have accepted it', () => {
  it('a 5xx on create fails the task after one create; nothing is billed or held', async () => {
    const s = await setup((_req, res) => sendJson(res, 500, { error: { code: 500, message: 'internal' } }))
    await s.steps(9)
    expect(s.creates()).toBe(1)
    expect(await s.task()).toMatchObject({ status: 'failed', error: { code: 'upstream_error' } })
    expect(await s.reserved()).toBe(0n)
  })

  it('a create that times out fails the task after one create', async () => {
    // Never answers: the step's own deadline cuts it.
    const s = await setup(() => new Promise<void>(() => {}))
    await s.steps(3)
    expect(s.creates()).toBe(1)
    expect(await s.task()).toMatchObject({ status: 'failed', error: { code: 'upstream_timeout' } })
  })

  it('a 429 on create is retried: the upstream turned it away', async () => {
    let n = 0
    const s = await setup((_req, res) =>
      n++ === 0
        ? sendJson(res, 429, { error: { code: 429, message: 'slow down', status: 'RESOURCE_EXHAUSTED' } })
        : sendJson(res, 200, { name: OPERATION }),
    )
    await s.steps(2)
    expect(s.creates()).toBe(2)
    expect(await s.task()).toMatchObject({ status: 'processing', upstreamState: { operation: OPERATION } })
  })

  it('a refused connection is retried: the create was never sent', async () => {
    const closed = await new Promise<number>((resolve) => {
      const srv = createServer()
      srv.listen(0, '127.0.0.1', () => {
        const { port } = srv.address() as { port: number }
        srv.close(() => resolve(port))
      })
    })
    const s = await setup(() => {}, `http://127.0.0.1:${closed}`)
    await s.steps(3)
    expect(await s.task()).toMatchObject({ status: 'processing', upstreamState: null, runs: 3 })
  })
})

describe('submitNotAccepted', () => {
  const network = (code: string) => Object.assign(new Error(code), { code })
  const wrapped = (cause: unknown) =>
    new UpstreamError('upstream_error', 'upstream x connection failed', { provider: 'x', cause })

  it('is true for a connect-phase refusal, through causes and for every address tried', () => {
    expect(submitNotAccepted(wrapped(network('ECONNREFUSED')))).toBe(true)
    expect(submitNotAccepted(wrapped(network('ENOTFOUND')))).toBe(true)
    expect(submitNotAccepted(wrapped(network('UND_ERR_CONNECT_TIMEOUT')))).toBe(true)
    const all = Object.assign(new AggregateError([network('ECONNREFUSED'), network('ENETUNREACH')]), {
      code: 'ECONNREFUSED',
    })
    expect(submitNotAccepted(wrapped(all))).toBe(true)
    expect(
      submitNotAccepted(
        new UpstreamError('rate_limit_exceeded', '429', { provider: 'x', upstreamStatus: 429 }),
      ),
    ).toBe(true)
  })

  it('is false when the request may have reached the upstream', () => {
    expect(submitNotAccepted(wrapped(network('ECONNRESET')))).toBe(false)
    expect(submitNotAccepted(wrapped(network('UND_ERR_HEADERS_TIMEOUT')))).toBe(false)
    expect(
      submitNotAccepted(new UpstreamError('upstream_error', '500', { provider: 'x', upstreamStatus: 500 })),
    ).toBe(false)
    expect(submitNotAccepted(new Error('x'))).toBe(false)
    const mixed = new AggregateError([network('ECONNREFUSED'), network('ECONNRESET')])
    expect(submitNotAccepted(wrapped(mixed))).toBe(false)
  })
})

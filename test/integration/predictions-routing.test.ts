import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { toUsd } from '../../src/billing/money.ts'
import { mockImage } from '../../src/providers/mock/media.ts'
import { healthKey } from '../../src/routing/health.ts'
import { sendJson, startFakeUpstream, type FakeHandler, type FakeUpstream } from '../support/fake-upstream.ts'
import { startGateway } from '../support/gateway.ts'

// Predictions are routed as chat is: a model's deployments in its routing order, those whose circuit
// breaker is open left out, and a task no upstream accepted yet offered to the next deployment when
// the first turns it away. Two fake upstreams per test on 127.0.0.1 speak the providers' wire formats
// (OpenAI images, Gemini long-running video); the runner is stepped with a fake clock.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const PNG = mockImage('routed', 0, '1:1')
const IMAGES = 'POST /v1/images/generations'
const png: FakeHandler = (_req, res) =>
  sendJson(res, 200, { created: 1, data: [{ b64_json: PNG.toString('base64') }], size: '1024x1024' })
const refuse =
  (status: number): FakeHandler =>
  (_req, res) =>
    sendJson(res, status, { error: { message: `refused with ${status}`, type: 'server_error' } })

const MP4 = Buffer.concat([
  Buffer.from('\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2', 'latin1'),
  Buffer.alloc(512, 1),
])
const VEO = 'veo-3.1-generate-preview'
const OPERATION = `models/${VEO}/operations/op-routed`

async function closedPort(): Promise<number> {
  return new Promise((resolve) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number }
      srv.close(() => resolve(port))
    })
  })
}

/**
 * A gateway with model `slug` on two providers of `kind`, alpha first (priority), beta second at
 * another price; `alphaUrl` replaces alpha's origin (a port nobody listens on).
 */
async function setup(
  kind: 'openai-compat' | 'gemini',
  model: Record<string, unknown>,
  alphaRoutes: Record<string, FakeHandler>,
  betaRoutes: Record<string, FakeHandler>,
  options: { alphaUrl?: string; failureThreshold?: number } = {},
) {
  const dir = mkdtempSync(join(tmpdir(), 'junction-pred-route-'))
  dirs.push(dir)
  const alpha = await startFakeUpstream(alphaRoutes)
  const beta = await startFakeUpstream(betaRoutes)
  const base = (up: FakeUpstream) => (kind === 'openai-compat' ? `${up.origin}/v1` : up.origin)
  const clock = { t: 1_800_000_000_000 }
  const gw = await startGateway({
    env: { GATEWAY_OUTPUTS_DIR: dir },
    file: {
      providers: {
        alpha: { kind, baseUrl: options.alphaUrl ?? base(alpha) },
        beta: { kind, baseUrl: base(beta) },
      },
      models: [model],
      // The breaker stays open for the whole test: the clock moves a minute a step.
      routing: { breaker: { failureThreshold: options.failureThreshold ?? 5, cooldownMs: 3_600_000 } },
      accounts: [{ id: 'acme', keys: ['sk-acme-0001'], credits: 10 }],
    },
    overrides: { now: () => clock.t, background: false },
  })
  onTestFinished(async () => {
    await alpha.close()
    await beta.close()
    await gw.close()
  })
  const auth = { authorization: 'Bearer sk-acme-0001' }
  return {
    alpha,
    beta,
    gw,
    async create(input: Record<string, unknown>) {
      const res = await gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers: auth,
        payload: { model: model.slug, input },
      })
      return res
    },
    async step(n = 1) {
      for (let i = 0; i < n; i++) {
        clock.t += 60_000
        await gw.deps.runner.runOnce()
      }
    },
    task: async (id: string) => gw.deps.store.tasks.get(id),
    record: async (id: string) => gw.deps.store.generations.get(id),
    reserved: async () => (await gw.deps.store.ledger.credits('acme', clock.t)).reserved,
  }
}

const picture = {
  slug: 'team/picture',
  type: 'image',
  deployments: [
    { provider: 'alpha', upstreamModel: 'gpt-image-1', pricing: { imageByTier: { '1K': 0.01 } } },
    { provider: 'beta', upstreamModel: 'gpt-image-1', pricing: { imageByTier: { '1K': 0.05 } } },
  ],
}

describe('prediction submission falls back between deployments', () => {
  it('a 429 on the first deployment sends the task to the second in the same step; billed at its price', async () => {
    const s = await setup('openai-compat', picture, { [IMAGES]: refuse(429) }, { [IMAGES]: png })
    const res = await s.create({ prompt: 'a fox', aspect_ratio: '1:1' })
    expect(res.statusCode, res.body).toBe(200)
    const id = res.json().data.task_id as string
    // Stored on the first deployment in the model's order.
    expect(await s.task(id)).toMatchObject({ deployment: 'alpha', provider: 'alpha' })
    await s.step()
    expect(s.alpha.requests).toHaveLength(1)
    expect(s.beta.requests).toHaveLength(1)
    expect(await s.task(id)).toMatchObject({ status: 'success', deployment: 'beta', provider: 'beta' })
    const record = await s.record(id)
    expect(record).toMatchObject({ provider: 'beta' })
    expect(toUsd(record!.cost)).toBe(0.05)
    expect(await s.reserved()).toBe(0n)
    // A 429 says nothing of alpha's health.
    expect(s.gw.deps.health.snapshot(healthKey('team/picture', 'alpha')).consecutiveFailures).toBe(0)
  })

  it('a refused connection to the first deployment moves the task to the second', async () => {
    const s = await setup(
      'openai-compat',
      picture,
      {},
      { [IMAGES]: png },
      { alphaUrl: `http://127.0.0.1:${await closedPort()}/v1` },
    )
    const id = (await s.create({ prompt: 'a fox' })).json().data.task_id as string
    await s.step()
    expect(await s.task(id)).toMatchObject({ status: 'success', deployment: 'beta' })
    expect(s.beta.requests).toHaveLength(1)
    expect(s.gw.deps.health.snapshot(healthKey('team/picture', 'alpha')).consecutiveFailures).toBe(1)
    // Counted with chat's failed upstream calls.
    const errors = await s.gw.deps.metrics.upstreamErrors.get()
    expect(errors.values).toEqual([
      expect.objectContaining({ labels: { provider: 'alpha', code: 'upstream_error' }, value: 1 }),
    ])
  })

  it('a 5xx after the request reached the first deployment does not move it: that job may exist', async () => {
    const s = await setup('openai-compat', picture, { [IMAGES]: refuse(500) }, { [IMAGES]: png })
    const id = (await s.create({ prompt: 'a fox' })).json().data.task_id as string
    await s.step(3)
    expect(s.alpha.requests).toHaveLength(1)
    expect(s.beta.requests).toHaveLength(0)
    expect(await s.task(id)).toMatchObject({ status: 'failed', deployment: 'alpha' })
    expect(await s.reserved()).toBe(0n)
    // Reported to alpha's breaker like a failed chat call.
    expect(s.gw.deps.health.snapshot(healthKey('team/picture', 'alpha')).consecutiveFailures).toBe(1)
  })

  it('when every deployment turns the task away, it is offered again later, from the first', async () => {
    let n = 0
    const s = await setup(
      'openai-compat',
      picture,
      { [IMAGES]: (req, res) => (n++ === 0 ? refuse(429)(req, res) : png(req, res)) },
      { [IMAGES]: refuse(429) },
    )
    const id = (await s.create({ prompt: 'a fox' })).json().data.task_id as string
    await s.step()
    expect(await s.task(id)).toMatchObject({ status: 'processing', runs: 1, submitStartedAt: null })
    await s.step()
    expect(await s.task(id)).toMatchObject({ status: 'success', deployment: 'alpha' })
    expect(s.alpha.requests).toHaveLength(2)
    expect(s.beta.requests).toHaveLength(1)
  })
})

describe('the generation record lists the upstream calls of a prediction', () => {
  const generation = async (s: Awaited<ReturnType<typeof setup>>, id: string) => {
    const res = await s.gw.app.inject({
      method: 'GET',
      url: `/v1/generation?id=${id}`,
      headers: { authorization: 'Bearer sk-acme-0001' },
    })
    expect(res.statusCode, res.body).toBe(200)
    return res.json() as { provider: string; attempts: Record<string, unknown>[] }
  }

  it('a submit the first deployment refused, then the one the second accepted', async () => {
    const s = await setup('openai-compat', picture, { [IMAGES]: refuse(429) }, { [IMAGES]: png })
    const id = (await s.create({ prompt: 'a fox' })).json().data.task_id as string
    await s.step()
    const body = await generation(s, id)
    expect(body.provider).toBe('beta')
    expect(body.attempts).toEqual([
      expect.objectContaining({
        provider: 'alpha',
        deployment: 'alpha',
        model: 'team/picture',
        status: 429,
        outcome: 'rate_limit_exceeded',
      }),
      expect.objectContaining({
        provider: 'beta',
        deployment: 'beta',
        model: 'team/picture',
        status: 200,
        outcome: 'ok',
      }),
    ])
  })

  it('kept across steps: the refused submit, the accepted one, a poll that failed; not the polls that answered', async () => {
    const veo = {
      slug: `google/${VEO}`,
      type: 'video',
      family: 'video-a',
      deployments: [
        { provider: 'alpha', upstreamModel: VEO, pricing: { videoPerSecond: { '720P': 0.1 } } },
        { provider: 'beta', upstreamModel: VEO, pricing: { videoPerSecond: { '720P': 0.1 } } },
      ],
    }
    const create = `POST /v1beta/models/${VEO}:predictLongRunning`
    let polls = 0
    const s = await setup(
      'gemini',
      veo,
      { [create]: refuse(429) },
      {
        [create]: (_req, res) => sendJson(res, 200, { name: OPERATION }),
        [`GET /v1beta/${OPERATION}`]: (req, res) => {
          polls++
          if (polls === 1) return sendJson(res, 200, { name: OPERATION })
          if (polls === 2) return refuse(503)(req, res)
          const uri = `${s.beta.origin}/v1beta/files/routed:download?alt=media`
          return sendJson(res, 200, {
            name: OPERATION,
            done: true,
            response: { generateVideoResponse: { generatedSamples: [{ video: { uri } }] } },
          })
        },
        'GET /v1beta/files/routed:download': (_req, res) => {
          res.writeHead(200, { 'content-type': 'video/mp4' })
          res.end(MP4)
        },
      },
    )
    const res = await s.create({ prompt: 'waves', duration: 4 })
    expect(res.statusCode, res.body).toBe(200)
    const id = res.json().data.task_id as string
    await s.step(4)
    expect(await s.task(id)).toMatchObject({ status: 'success', deployment: 'beta' })
    const attempts = (await generation(s, id)).attempts
    expect(attempts.map((a) => [a.deployment, a.status, a.outcome])).toEqual([
      ['alpha', 429, 'rate_limit_exceeded'],
      ['beta', 200, 'ok'],
      ['beta', 503, expect.any(String)],
    ])
  })
})

describe('circuit breakers apply to predictions', () => {
  it('a deployment whose breaker is open is not offered a task', async () => {
    const s = await setup(
      'openai-compat',
      picture,
      { [IMAGES]: refuse(500) },
      { [IMAGES]: png },
      { failureThreshold: 1 },
    )
    // The runner reports alpha's 500 to its breaker, which opens (threshold 1).
    const first = (await s.create({ prompt: 'one' })).json().data.task_id as string
    await s.step()
    expect(await s.task(first)).toMatchObject({ status: 'failed' })
    expect(s.gw.deps.health.snapshot(healthKey('team/picture', 'alpha')).state).toBe('open')

    const second = (await s.create({ prompt: 'two' })).json().data.task_id as string
    expect(await s.task(second)).toMatchObject({ deployment: 'beta' })
    await s.step()
    expect(await s.task(second)).toMatchObject({ status: 'success', deployment: 'beta' })
    expect(s.alpha.requests).toHaveLength(1)
    expect(s.beta.requests).toHaveLength(1)
  })

  it('a task stored on a deployment whose breaker opened since is submitted to the next one', async () => {
    const s = await setup('openai-compat', picture, { [IMAGES]: png }, { [IMAGES]: png })
    const id = (await s.create({ prompt: 'a fox' })).json().data.task_id as string
    expect(await s.task(id)).toMatchObject({ deployment: 'alpha' })
    for (let i = 0; i < 5; i++) s.gw.deps.health.failure(healthKey('team/picture', 'alpha'))
    await s.step()
    expect(await s.task(id)).toMatchObject({ status: 'success', deployment: 'beta' })
    expect(s.alpha.requests).toHaveLength(0)
  })

  it('with every breaker open, creation answers 503 no_available_provider and holds nothing', async () => {
    const s = await setup('openai-compat', picture, { [IMAGES]: png }, { [IMAGES]: png })
    for (const d of ['alpha', 'beta']) {
      for (let i = 0; i < 5; i++) s.gw.deps.health.failure(healthKey('team/picture', d))
    }
    const res = await s.create({ prompt: 'a fox' })
    expect(res.statusCode).toBe(503)
    expect(res.json().error.code).toBe('no_available_provider')
    expect(await s.reserved()).toBe(0n)
  })
})

describe('polling stays with the deployment that accepted the task', () => {
  const video = {
    slug: `google/${VEO}`,
    type: 'video',
    family: 'video-a',
    deployments: [
      { provider: 'alpha', upstreamModel: VEO },
      { provider: 'beta', upstreamModel: VEO },
    ],
  }
  const accept: FakeHandler = (_req, res) => sendJson(res, 200, { name: OPERATION })
  const pending: FakeHandler = (_req, res) => sendJson(res, 200, { name: OPERATION })

  it('accepted by the second deployment, polled there only, even once its breaker opens', async () => {
    const create = `POST /v1beta/models/${VEO}:predictLongRunning`
    const s = await setup(
      'gemini',
      video,
      { [create]: refuse(429), [`GET /v1beta/${OPERATION}`]: pending },
      { [create]: accept, [`GET /v1beta/${OPERATION}`]: pending },
    )
    const res = await s.create({ prompt: 'waves', duration: 4 })
    expect(res.statusCode, res.body).toBe(200)
    const id = res.json().data.task_id as string
    await s.step()
    expect(await s.task(id)).toMatchObject({
      status: 'processing',
      deployment: 'beta',
      upstreamState: { operation: OPERATION },
    })
    for (let i = 0; i < 5; i++) s.gw.deps.health.failure(healthKey(`google/${VEO}`, 'beta'))
    await s.step(2)
    expect(s.alpha.requests.map((r) => r.method)).toEqual(['POST'])
    expect(s.beta.requests.map((r) => r.method)).toEqual(['POST', 'GET', 'GET'])
    expect(await s.task(id)).toMatchObject({ status: 'processing', deployment: 'beta' })
    // A poll that answers tells the breaker the deployment is back.
    expect(s.gw.deps.health.snapshot(healthKey(`google/${VEO}`, 'beta')).state).toBe('closed')
  })
})

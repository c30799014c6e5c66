import { describe, expect, it, onTestFinished } from 'vitest'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { startReceiver } from '../support/receiver.ts'

// The reporting routes the console reads, usable with a key as any API route: spend per day and
// model, generation listings with a model filter, prediction tasks, webhook deliveries; and the
// operator's account activity, one generation and the deployments. Each shows the caller's own only.

const ADMIN = 'admin-key-0123456789abcdef'
const A = { authorization: 'Bearer sk-a-0123456789' }
const B = { authorization: 'Bearer sk-b-0123456789' }
const OP = { authorization: `Bearer ${ADMIN}` }
const DAY = 86_400_000

async function setup(clock = { t: Date.UTC(2026, 10, 20, 12) }) {
  const gw = await startGateway({
    env: { GATEWAY_ADMIN_KEY: ADMIN, MOCK_TASK_DELAY_MS: '0' },
    file: {
      accounts: [
        { id: 'a', credits: 10, keys: ['sk-a-0123456789'] },
        { id: 'b', credits: 10, keys: ['sk-b-0123456789'] },
      ],
      predictions: { webhooks: { allowHttp: true, allowedHosts: ['127.0.0.1'] } },
    },
    overrides: { now: () => clock.t, background: false },
  })
  onTestFinished(() => gw.close())
  return { gw, clock }
}

const get = async (gw: TestGateway, url: string, headers: Record<string, string>) => {
  const res = await gw.app.inject({ method: 'GET', url, headers })
  return { status: res.statusCode, body: res.json() }
}
const chat = (gw: TestGateway, headers: Record<string, string>, content: string) =>
  gw.app.inject({
    method: 'POST',
    url: '/v1/chat/completions',
    headers,
    payload: { model: 'mock/chat', messages: [{ role: 'user', content }] },
  })
const embed = (gw: TestGateway, headers: Record<string, string>) =>
  gw.app.inject({
    method: 'POST',
    url: '/v1/embeddings',
    headers,
    payload: { model: 'mock/embed', input: ['x'] },
  })

describe('GET /v1/activity', () => {
  it('sums the account’s records per UTC day and model over the last 7, 30 or 90 days', async () => {
    const { gw, clock } = await setup()
    await chat(gw, A, 'old') // 40 days ago: outside 30 days, inside 90
    clock.t += 40 * DAY
    const day1 = clock.t
    await chat(gw, A, 'one')
    await chat(gw, A, 'two')
    await embed(gw, A)
    clock.t += DAY
    await chat(gw, A, 'three')
    await chat(gw, B, 'someone else')

    const records = (await get(gw, '/v1/generations?limit=100', A)).body.data as {
      model: string
      createAt: string
      usage: { cost: number; prompt_tokens: number; completion_tokens: number }
    }[]
    expect(records).toHaveLength(5)
    const r30 = (await get(gw, '/v1/activity?days=30', A)).body
    const iso = (t: number) => new Date(t).toISOString().slice(0, 10)
    expect(r30).toMatchObject({
      object: 'list',
      days: 30,
      until: iso(clock.t),
      since: iso(clock.t - 29 * DAY),
    })
    const sumOf = (rs: typeof records) => rs.reduce((s, r) => s + r.usage.cost, 0)
    const inRange = records.filter((r) => Date.parse(r.createAt) >= day1 - (day1 % DAY))
    expect(
      r30.data.map((r: { date: string; model: string; requests: number }) => [r.date, r.model, r.requests]),
    ).toEqual([
      [iso(day1), 'mock/chat', 2],
      [iso(day1), 'mock/embed', 1],
      [iso(day1 + DAY), 'mock/chat', 1],
    ])
    expect(r30.total_requests).toBe(4)
    expect(r30.total_cost).toBeCloseTo(sumOf(inRange), 12)
    const chats = inRange.filter((r) => r.model === 'mock/chat' && r.createAt.startsWith(iso(day1)))
    expect(r30.data[0]).toMatchObject({
      prompt_tokens: chats.reduce((s, r) => s + r.usage.prompt_tokens, 0),
      completion_tokens: chats.reduce((s, r) => s + r.usage.completion_tokens, 0),
    })
    expect(r30.data[0].cost).toBeCloseTo(sumOf(chats), 12)

    const r90 = (await get(gw, '/v1/activity?days=90', A)).body
    expect(r90.total_requests).toBe(5)
    expect(r90.total_cost).toBeCloseTo(sumOf(records), 12)
    expect((await get(gw, '/v1/activity?days=7', A)).body.total_requests).toBe(4)
    expect((await get(gw, '/v1/activity?days=7', B)).body.total_requests).toBe(1)

    // The operator's view of one account is the same report.
    expect((await get(gw, '/admin/accounts/a/activity?days=30', OP)).body).toEqual(r30)
    expect((await get(gw, '/admin/accounts/nobody/activity', OP)).status).toBe(404)

    for (const bad of ['days=14', 'days=abc', 'since=0']) {
      const res = await get(gw, `/v1/activity?${bad}`, A)
      expect(res.status).toBe(400)
      expect(res.body.error.type).toBe('invalid_request_error')
    }
  })
})

describe('GET /v1/generations', () => {
  it('pages the account’s records newest first, filtered by model', async () => {
    const { gw } = await setup()
    const ids: string[] = []
    for (const c of ['1', '2', '3']) ids.push((await chat(gw, A, c)).json().id)
    await embed(gw, A)
    await chat(gw, B, 'b')
    const p1 = (await get(gw, '/v1/generations?limit=2&model=mock/chat', A)).body
    expect(p1.data.map((g: { generationId: string }) => g.generationId)).toEqual([ids[2], ids[1]])
    const p2 = (await get(gw, `/v1/generations?limit=2&model=mock/chat&before=${p1.next_cursor}`, A)).body
    expect(p2).toMatchObject({ next_cursor: null, data: [{ generationId: ids[0], model: 'mock/chat' }] })
    expect((await get(gw, '/v1/generations', A)).body.data).toHaveLength(4)
    expect((await get(gw, '/v1/generations', B)).body.data).toHaveLength(1)
    expect((await get(gw, '/v1/generations?limit=101', A)).status).toBe(400)
    // One record by id for the operator, with its account.
    const one = (await get(gw, `/admin/generations/${ids[0]}`, OP)).body
    expect(one).toMatchObject({ generationId: ids[0], account_id: 'a' })
    expect((await get(gw, '/admin/generations/gen-unknown', OP)).status).toBe(404)
    expect((await get(gw, `/admin/generations/${ids[0]}`, A)).status).toBe(401)
  })
})

describe('GET /v1/predictions and /v1/webhooks/deliveries', () => {
  it('lists the account’s tasks with their outputs, and the webhook deliveries made for them', async () => {
    const { gw, clock } = await setup()
    const receiver = await startReceiver((_req, res) => res.writeHead(204).end())
    onTestFinished(() => receiver.close())
    const create = (headers: Record<string, string>, prompt: string, webhook?: string) =>
      gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers,
        payload: { model: 'mock/image', input: { prompt }, ...(webhook ? { webhook } : {}) },
      })
    const first = (await create(A, 'a fox', `${receiver.origin}/hook`)).json().data.task_id
    const second = (await create(A, 'a cat')).json().data.task_id
    await create(B, 'not yours')
    for (let i = 0; i < 5; i++) {
      clock.t += 60_000
      await gw.deps.runner.runOnce()
    }
    await gw.deps.webhookSender.runOnce()

    const list = (await get(gw, '/v1/predictions?limit=1', A)).body
    expect(list.data).toHaveLength(1)
    expect(list.data[0]).toMatchObject({
      id: second,
      object: 'prediction',
      model: 'mock/image',
      status: 'success',
      error: null,
    })
    expect(list.data[0].output[0].image).toMatch(/\/v1\/outputs\/[^?]+\?expires=\d+&signature=[\w-]+$/)
    expect(list.data[0].usage.cost).toBeGreaterThan(0)
    const next = (await get(gw, `/v1/predictions?limit=1&before=${list.next_cursor}`, A)).body
    expect(next).toMatchObject({ next_cursor: null, data: [{ id: first }] })
    expect((await get(gw, '/v1/predictions', B)).body.data).toHaveLength(1)

    const deliveries = (await get(gw, '/v1/webhooks/deliveries', A)).body.data
    expect(deliveries).toEqual([
      expect.objectContaining({
        task_id: first,
        url: `${receiver.origin}/hook`,
        status: 'delivered',
        attempts: 1,
        last_error: null,
      }),
    ])
    expect((await get(gw, '/v1/webhooks/deliveries', B)).body.data).toEqual([])
  })
})

describe('GET /v1/account', () => {
  it('shows the caller’s credits with what is held, its discount and limits', async () => {
    const { gw } = await setup()
    await gw.deps.store.ledger.reserve('a', 'hold-1', 2_000_000_000_000n, gw.deps.now(), 60_000)
    expect((await get(gw, '/v1/account', A)).body).toMatchObject({
      id: 'a',
      object: 'account',
      credits: { total_credits: 10, total_usage: 0, balance: 10, reserved: 2, available: 8 },
      discount_percent: 0,
      rate_limits: { requests_per_minute: null, tokens_per_minute: null },
    })
  })
})

describe('GET /admin/deployments', () => {
  it('lists each model’s deployments with prices and this instance’s health', async () => {
    const { gw } = await setup()
    await chat(gw, A, 'warm up')
    const models = (await get(gw, '/admin/deployments', OP)).body.data
    const chatModel = models.find((m: { model: string }) => m.model === 'mock/chat')
    expect(chatModel.deployments[0]).toMatchObject({
      provider: 'mock',
      pricing: { currency: 'USD', prompt: expect.any(Number) },
      health: { breaker: 'closed', consecutive_failures: 0, error_rate: 0 },
    })
    expect(chatModel.deployments[0].health.latency_ms).toEqual(expect.any(Number))
    expect((await get(gw, '/admin/deployments', A)).status).toBe(401)
  })
})

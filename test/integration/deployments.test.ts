import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { toUsd } from '../../src/billing/money.ts'
import { jsonFile, sendJson, sseFile, startFakeUpstream } from '../support/fake-upstream.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// A model served by two deployments on two upstreams: the one that answers is the one charged.

const failing = (status: number) => jsonFile('openai-compat/completion.json', status)
const fail =
  (status: number, message = 'boom') =>
  (_req: unknown, res: Parameters<typeof sendJson>[0]) =>
    sendJson(res, status, { error: { message, type: 'server_error' } })

let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

async function twoDeployments(
  first: Record<string, Parameters<typeof startFakeUpstream>[0][string]>,
  second: Record<string, Parameters<typeof startFakeUpstream>[0][string]>,
  credits = 10,
) {
  const a = await startFakeUpstream(first)
  const b = await startFakeUpstream(second)
  closers.push(
    () => a.close(),
    () => b.close(),
  )
  const gw: TestGateway = await startGateway({
    listen: true,
    file: {
      providers: {
        alpha: { kind: 'openai-compat', baseUrl: `${a.origin}/v1` },
        beta: { kind: 'openai-compat', baseUrl: `${b.origin}/v1` },
      },
      models: [
        {
          slug: 'team/chat',
          deployments: [
            { provider: 'alpha', upstreamModel: 'alpha-model', pricing: { prompt: 1, completion: 1 } },
            { provider: 'beta', upstreamModel: 'beta-model', pricing: { prompt: 100, completion: 200 } },
          ],
        },
      ],
      accounts: [{ id: 'acme', keys: ['sk-acme-0001'], credits }],
    },
  })
  closers.push(() => gw.close())
  const client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-acme-0001', maxRetries: 0 })
  return { a, b, gw, client }
}

const ask = { model: 'team/chat', messages: [{ role: 'user' as const, content: 'hi' }] }

describe('several deployments per model', () => {
  it('a retryable failure (500) moves to the next deployment; its provider and price are charged', async () => {
    const { a, b, gw, client } = await twoDeployments(
      { 'POST /v1/chat/completions': fail(500) },
      { 'POST /v1/chat/completions': jsonFile('openai-compat/completion.json') },
    )
    const answer = await client.chat.completions.create(ask)
    expect(answer.choices[0]?.message.content).toBe('Hello! How can I assist you today?')
    expect([a.requests.length, b.requests.length]).toEqual([1, 1])
    expect((a.requests[0]?.body as { model: string }).model).toBe('alpha-model')
    expect((b.requests[0]?.body as { model: string }).model).toBe('beta-model')
    const rec = await readGeneration(gw, answer.id, acme)
    // 19 prompt tokens at $100/M + 10 completion tokens at $200/M (beta's price, not alpha's).
    expect(rec.provider).toBe('beta')
    expect(rec.usage.upstream_cost).toBe(toUsd(19n * 100_000_000n + 10n * 200_000_000n))
  })

  it('a stream whose first deployment fails before the first chunk is served by the next', async () => {
    const { a, b, gw, client } = await twoDeployments(
      { 'POST /v1/chat/completions': fail(503) },
      { 'POST /v1/chat/completions': sseFile('openai-compat/text.sse') },
    )
    let content = ''
    let id = ''
    for await (const c of await client.chat.completions.create({ ...ask, stream: true })) {
      content += c.choices[0]?.delta.content ?? ''
      id = c.id
    }
    expect(content.length).toBeGreaterThan(0)
    expect([a.requests.length, b.requests.length]).toEqual([1, 1])
    expect((await readGeneration(gw, id, acme)).provider).toBe('beta')
  })

  it('a client error (400) is not retried on the next deployment', async () => {
    const { a, b, client } = await twoDeployments(
      { 'POST /v1/chat/completions': fail(400, 'bad parameter') },
      { 'POST /v1/chat/completions': jsonFile('openai-compat/completion.json') },
    )
    await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 400 })
    expect([a.requests.length, b.requests.length]).toEqual([1, 0])
  })

  it('when every deployment fails the last failure is answered and nothing is charged', async () => {
    const { a, b, gw, client } = await twoDeployments(
      { 'POST /v1/chat/completions': fail(500) },
      { 'POST /v1/chat/completions': failing(502) },
    )
    await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 502 })
    // Each deployment once, then each once more after a backoff (attemptsPerDeployment 2 by default).
    expect([a.requests.length, b.requests.length]).toEqual([2, 2])
    const credits = (await (await fetch(`${gw.origin}/v1/credits`, { headers: acme })).json()) as {
      data: unknown
    }
    expect(credits.data).toEqual({ total_credits: 10, total_usage: 0, balance: 10 })
  })

  it('402 without credits: no upstream is called', async () => {
    const { a, b, client } = await twoDeployments(
      { 'POST /v1/chat/completions': jsonFile('openai-compat/completion.json') },
      { 'POST /v1/chat/completions': jsonFile('openai-compat/completion.json') },
      0,
    )
    await expect(client.chat.completions.create(ask)).rejects.toMatchObject({ status: 402 })
    expect([a.requests.length, b.requests.length]).toEqual([0, 0])
  })
})

const acme = { authorization: 'Bearer sk-acme-0001' }

import { afterEach, describe, expect, it } from 'vitest'
import { toUsd, usd } from '../../src/billing/money.ts'
import {
  sendJson,
  startFakeUpstream,
  type FakeUpstream,
  type RecordedRequest,
} from '../support/fake-upstream.ts'
import { cutOffAt } from '../../src/inference/chat.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// The reservation is a real bound: the output limit it assumed is sent upstream, and an upstream that
// ignores the limit is cut off (stream) or flagged (blocking); either is charged at most the hold.

const key = { authorization: 'Bearer sk-acme-0001' }
let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

/** A completion whose usage says `completion` tokens. */
function completion(completionTokens: number) {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'length' }],
    usage: { prompt_tokens: 10, completion_tokens: completionTokens, total_tokens: 10 + completionTokens },
  }
}

/** Like a real upstream: never more output than the limit it was sent (20 000 when it got none). */
const honouring = (req: RecordedRequest, res: Parameters<typeof sendJson>[0]) => {
  const limit = (req.body as { max_tokens?: number }).max_tokens
  sendJson(res, 200, completion(Math.min(limit ?? 20_000, 20_000)))
}

async function gateway(fake: FakeUpstream, credits: number): Promise<TestGateway> {
  const gw = await startGateway({
    listen: true,
    file: {
      limits: { defaultMaxOutputTokens: 1000 },
      providers: { up: { kind: 'openai-compat', baseUrl: `${fake.origin}/v1` } },
      models: [{ slug: 'up/m', pricing: { prompt: 1, completion: 2 } }],
      accounts: [{ id: 'acme', keys: ['sk-acme-0001'], credits }],
    },
  })
  closers.push(() => gw.close())
  return gw
}

const ask = (stream = false) => ({
  model: 'up/m',
  messages: [{ role: 'user', content: 'hi' }],
  ...(stream ? { stream: true } : {}),
})

async function post(gw: TestGateway, body: unknown): Promise<Response> {
  return fetch(`${gw.origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { ...key, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}

async function balance(gw: TestGateway): Promise<number> {
  const res = await fetch(`${gw.origin}/v1/credits`, { headers: key })
  return ((await res.json()) as { data: { balance: number } }).data.balance
}

describe('the output limit the reservation assumed', () => {
  it('is sent upstream when the client gives none; the client’s own is sent as it is', async () => {
    const fake = await startFakeUpstream({ 'POST /v1/chat/completions': honouring })
    closers.push(() => fake.close())
    const gw = await gateway(fake, 1)
    expect((await post(gw, ask())).status).toBe(200)
    expect((await post(gw, { ...ask(), max_completion_tokens: 77 })).status).toBe(200)
    expect(fake.requests.map((r) => (r.body as { max_tokens?: number }).max_tokens)).toEqual([1000, 77])
  })

  it('300 concurrent requests against credits for 20 overdraw by less than one reservation', async () => {
    const fake = await startFakeUpstream({ 'POST /v1/chat/completions': honouring })
    closers.push(() => fake.close())
    // One reservation: at most 10 prompt bytes-as-tokens × $1/M + 1000 × $2/M ≈ $0.00201.
    const oneReservation = 0.000018 + 0.002
    const gw = await gateway(fake, 0.04)
    const answers = await Promise.all(Array.from({ length: 300 }, () => post(gw, ask())))
    const statuses = answers.map((r) => r.status)
    await Promise.all(answers.map((r) => r.arrayBuffer()))
    const admitted = statuses.filter((s) => s === 200).length
    expect(statuses.filter((s) => s !== 200 && s !== 402)).toEqual([])
    expect(admitted).toBeGreaterThanOrEqual(19)
    expect(admitted).toBeLessThanOrEqual(21)
    // Before the bound was sent upstream, each admitted request used 20 000 tokens: −$0.76 on $0.04.
    expect(await balance(gw)).toBeGreaterThanOrEqual(-oneReservation)
    expect(fake.requests.length).toBe(admitted)
  })

  it('a stream past the limit is cut off by its tokens, and charged at most the hold', async () => {
    const fake = await startFakeUpstream({
      // Ignores max_tokens: 5 000 one-word chunks, no usage.
      'POST /v1/chat/completions': async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        for (let i = 0; i < 5_000 && !res.destroyed; i++) {
          const chunk = {
            id: 'c',
            object: 'chat.completion.chunk',
            created: 1,
            model: 'm',
            choices: [{ index: 0, delta: { content: ' word' }, finish_reason: null }],
          }
          if (!res.write(`data: ${JSON.stringify(chunk)}\n\n`)) await new Promise((r) => res.once('drain', r))
        }
        res.end('data: [DONE]\n\n')
      },
    })
    closers.push(() => fake.close())
    const gw = await gateway(fake, 1)
    const res = await post(gw, ask(true))
    const text = await res.text()
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '))
    const last = events.at(-1) ?? ''
    expect(last).toContain('"code":"upstream_error"')
    expect(last).toContain('output limit of 1000 tokens')
    expect(text).not.toContain('[DONE]')
    // One token a chunk: the chunks up to the cut-off went out, the next one was counted, not sent.
    expect(events.length - 1).toBe(cutOffAt(1000))
    expect(gw.deps.stats.outputOverruns).toBe(1)
    const id = res.headers.get('x-generation-id') ?? ''
    const rec = await readGeneration(gw, id, key)
    expect(rec.cost_source).toBe('estimate')
    expect(rec.usage.completion_tokens).toBe(cutOffAt(1000) + 1)
    // Charged the hold: 10 prompt tokens at $1/M and 1 000 output tokens at $2/M.
    expect(rec.usage.cost).toBe(0.00201)
    expect(rec.unbilled_overage.usd).toBeGreaterThan(0)
  })

  it('a blocking answer past the limit is charged the hold, the rest recorded, and flagged', async () => {
    const fake = await startFakeUpstream({
      'POST /v1/chat/completions': (_req, res) => sendJson(res, 200, completion(5_000)),
    })
    closers.push(() => fake.close())
    const gw = await gateway(fake, 1)
    const res = await post(gw, ask())
    expect(res.status).toBe(200)
    expect(gw.deps.stats.outputOverruns).toBe(1)
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.usage.upstream_cost).toBe(toUsd(usd(0.00001) + usd(0.01)))
    expect(rec.usage.cost).toBe(0.00201)
    // $0.008 of the $0.01001 priced, and the 4 004 of the 5 010 tokens it stands for.
    expect(rec.unbilled_overage).toEqual({ usd: 0.008, tokens: 4004 })
  })
})

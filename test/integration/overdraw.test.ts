import { mkdtempSync, rmSync } from 'node:fs'
import type { ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { cutOffAt } from '../../src/inference/chat.ts'
import {
  sendJson,
  startFakeUpstream,
  type FakeHandler,
  type FakeUpstream,
  type RecordedRequest,
} from '../support/fake-upstream.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'
import { createTestDatabase } from '../support/postgres.ts'

// An account is never overdrawn past what admission allowed: a request is charged at most its hold
// (plus the account's overdraft), whatever its upstream streams or reports; the excess is recorded on
// the generation and counted in /metrics.

const key = { authorization: 'Bearer sk-acme-0001' }
const ADMIN = 'admin-key-overdraw-0001'
const admin = { authorization: `Bearer ${ADMIN}` }
// 10 prompt tokens (the bound of 'hi') at $1/M and 1 000 output tokens at $2/M.
const HOLD = 0.00201

let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

async function gateway(
  fake: FakeUpstream,
  credits: number,
  overdraftUsd?: number,
  databaseUrl = 'memory',
): Promise<TestGateway> {
  const gw = await startGateway({
    listen: true,
    env: { GATEWAY_ADMIN_KEY: ADMIN, GATEWAY_DATABASE_URL: databaseUrl },
    file: {
      limits: { defaultMaxOutputTokens: 1000 },
      providers: { up: { kind: 'openai-compat', baseUrl: `${fake.origin}/v1` } },
      models: [{ slug: 'up/m', pricing: { prompt: 1, completion: 2 } }],
      accounts: [
        {
          id: 'acme',
          keys: ['sk-acme-0001'],
          credits,
          ...(overdraftUsd === undefined ? {} : { overdraftUsd }),
        },
      ],
    },
  })
  closers.push(() => gw.close())
  return gw
}

async function upstream(routes: Parameters<typeof startFakeUpstream>[0]): Promise<FakeUpstream> {
  const fake = await startFakeUpstream(routes)
  closers.push(() => fake.close())
  return fake
}

const ask = (stream = false) => ({
  model: 'up/m',
  messages: [{ role: 'user', content: 'hi' }],
  ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
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

/** The value of a /metrics sample, 0 when absent. */
async function metric(gw: TestGateway, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${gw.origin}/metrics`, { headers: admin })).text()
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`))
  return line ? Number(line.split(' ').at(-1)) : 0
}

const chunk = (delta: object, usage?: object) => ({
  id: 'c',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: usage ? [] : [{ index: 0, delta, finish_reason: null }],
  ...(usage ? { usage } : {}),
})

const usage20k = { prompt_tokens: 10, completion_tokens: 20_000, total_tokens: 20_010 }

/** Ignores max_tokens and reports 20 000 output tokens, blocking or streamed (a usage chunk). */
const overReporting = async (req: RecordedRequest, res: ServerResponse) => {
  if ((req.body as { stream?: boolean }).stream !== true) {
    sendJson(res, 200, {
      id: 'chatcmpl-1',
      object: 'chat.completion',
      created: 1,
      model: 'm',
      choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'length' }],
      usage: usage20k,
    })
    return
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' })
  res.write(`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'ok' }))}\n\n`)
  res.write(`data: ${JSON.stringify(chunk({}, usage20k))}\n\n`)
  res.end('data: [DONE]\n\n')
}

/**
 * An upstream handler that streams `data` until the gateway hangs up (or `max` chunks); `state.sent`
 * counts the chunks written.
 */
function endless(data: string, max: number, state: { sent: number }): FakeHandler {
  return async (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' })
    while (!res.destroyed && state.sent < max) {
      state.sent++
      if (!res.write(data)) {
        await new Promise((r) => {
          res.once('drain', r)
          res.once('close', r)
        })
      }
    }
    res.end()
  }
}

describe('a request is charged at most its hold', () => {
  it('a firehose stream that ignores max_tokens is cut by its tokens; a $0.01 account ends ≥ 0', async () => {
    const state = { sent: 0 }
    const fake = await upstream({
      // 50 tokens a chunk, endlessly (until the gateway hangs up), never a usage.
      'POST /v1/chat/completions': endless(
        `data: ${JSON.stringify(chunk({ content: ' word'.repeat(50) }))}\n\n`,
        100_000,
        state,
      ),
    })
    const gw = await gateway(fake, 0.01)
    const res = await post(gw, ask(true))
    const text = await res.text()
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '))
    expect(events.at(-1)).toContain('"code":"upstream_error"')
    // Whole chunks up to the cut-off went out, not one token past it.
    const delivered = events.slice(0, -1).length * 50
    expect(delivered).toBeLessThanOrEqual(cutOffAt(1000))
    expect(delivered).toBeGreaterThan(cutOffAt(1000) - 50)
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.usage.cost).toBe(HOLD)
    expect(await balance(gw)).toBeGreaterThanOrEqual(0)
    expect(await balance(gw)).toBeCloseTo(0.01 - HOLD, 12)
    // The upstream was hung up on long before its 100 000 chunks.
    expect(state.sent).toBeLessThan(100_000)
  })

  it('so is an endless stream of reasoning: reasoning is billed, so it counts', async () => {
    const state = { sent: 0 }
    const fake = await upstream({
      // DeepSeek's field, 50 tokens a chunk, never an answer.
      'POST /v1/chat/completions': endless(
        `data: ${JSON.stringify(chunk({ reasoning_content: ' word'.repeat(50) }))}\n\n`,
        20_000,
        state,
      ),
    })
    const gw = await gateway(fake, 0.01)
    const res = await post(gw, ask(true))
    const events = (await res.text()).split('\n\n').filter((e) => e.startsWith('data: '))
    expect(events.at(-1)).toContain('"code":"upstream_error"')
    expect((events.length - 1) * 50).toBeLessThanOrEqual(cutOffAt(1000))
    expect(state.sent).toBeLessThan(20_000)
    expect(await balance(gw)).toBeCloseTo(0.01 - HOLD, 12)
  })

  it('a blocking answer reporting 20 000 tokens against a 1 000-token bound is charged the hold', async () => {
    const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
    const gw = await gateway(fake, 1)
    const res = await post(gw, ask())
    expect(res.status).toBe(200)
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.usage.completion_tokens).toBe(20_000)
    expect(rec.usage.upstream_cost).toBe(0.04001)
    expect(rec.usage.cost).toBe(HOLD)
    // $0.038 unbilled: 95 % of the 20 010 tokens.
    expect(rec.unbilled_overage).toEqual({ usd: 0.038, tokens: 19_005 })
    expect(await balance(gw)).toBeCloseTo(1 - HOLD, 12)
    expect(await metric(gw, 'junction_unbilled_overage_usd_total', 'model="up/m"')).toBeCloseTo(0.038, 12)
    expect(await metric(gw, 'junction_unbilled_overage_tokens_total', 'model="up/m"')).toBe(19_005)
  })

  it('so is a stream whose usage chunk reports 20 000 tokens', async () => {
    const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
    const gw = await gateway(fake, 1)
    const res = await post(gw, ask(true))
    const text = await res.text()
    expect(text).toContain('[DONE]')
    // The client asked for the usage: it gets the upstream's, the charge is the hold.
    expect(text).toContain('"completion_tokens":20000')
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.cost_source).toBe('upstream')
    expect(rec.usage.cost).toBe(HOLD)
    expect(rec.unbilled_overage).toEqual({ usd: 0.038, tokens: 19_005 })
    expect(await metric(gw, 'junction_unbilled_overage_usd_total', 'model="up/m"')).toBeCloseTo(0.038, 12)
  })

  it('300 concurrent requests, blocking and streamed, reporting 20 000 tokens, leave $0.0402 at ≥ 0', async () => {
    const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
    const gw = await gateway(fake, 0.0402)
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => post(gw, ask(i % 2 === 1))))
    await Promise.all(answers.map((r) => r.arrayBuffer()))
    const statuses = answers.map((r) => r.status)
    expect(statuses.filter((s) => s !== 200 && s !== 402)).toEqual([])
    const admitted = statuses.filter((s) => s === 200).length
    expect(admitted).toBeGreaterThanOrEqual(20)
    // Before: −$0.76, each admitted request billed its 20 000 tokens.
    expect(await balance(gw)).toBeGreaterThanOrEqual(0)
  })
})

describe('every route gets the cap', () => {
  it('embeddings reporting a million tokens for a 2-token input are charged the hold', async () => {
    const fake = await upstream({
      'POST /v1/embeddings': (_req, res) =>
        sendJson(res, 200, {
          object: 'list',
          data: [{ object: 'embedding', index: 0, embedding: [0.6, 0.8] }],
          model: 'e',
          usage: { prompt_tokens: 1_000_000, total_tokens: 1_000_000 },
        }),
    })
    const gw = await startGateway({
      listen: true,
      file: {
        providers: { up: { kind: 'openai-compat', baseUrl: `${fake.origin}/v1` } },
        models: [{ slug: 'up/e', type: 'embedding', pricing: { embedding: 1 } }],
        accounts: [{ id: 'acme', keys: ['sk-acme-0001'], credits: 1 }],
      },
    })
    closers.push(() => gw.close())
    const res = await fetch(`${gw.origin}/v1/embeddings`, {
      method: 'POST',
      headers: { ...key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'up/e', input: 'hi' }),
    })
    expect(res.status).toBe(200)
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    // 'hi' is at most 2 tokens at $1/M: $0.000002 held, $1 reported.
    expect(rec.usage.upstream_cost).toBe(1)
    expect(rec.usage.cost).toBe(0.000002)
    expect(rec.unbilled_overage).toEqual({ usd: 0.999998, tokens: 999_998 })
    expect(await balance(gw)).toBeCloseTo(1 - 0.000002, 12)
  })
})

describe('an account’s overdraft', () => {
  it('lets one charge pass its hold by at most the overdraft', async () => {
    const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
    const gw = await gateway(fake, 1, 0.005)
    const res = await post(gw, ask())
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.usage.cost).toBe(0.00701)
    expect(rec.unbilled_overage.usd).toBeCloseTo(0.04001 - HOLD - 0.005, 12)
  })

  // Each store caps the charge in its own settle step: every backend, with and without an overdraft.
  it.each([
    ['memory', 0],
    ['memory', 0.01],
    ['sqlite', 0],
    ['sqlite', 0.01],
    ['postgres', 0],
    ['postgres', 0.01],
  ])(
    '300 concurrent requests on %s with an overdraft of $%s end at or above −overdraft',
    async (backend, overdraft) => {
      let url = backend
      if (backend === 'sqlite') {
        const dir = mkdtempSync(join(tmpdir(), 'junction-overdraw-'))
        closers.push(async () => rmSync(dir, { recursive: true, force: true }))
        url = `sqlite:${join(dir, 'j.db')}`
      } else if (backend === 'postgres') {
        const db = await createTestDatabase()
        closers.push(() => db.drop())
        url = db.url
      }
      const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
      const gw = await gateway(fake, 0.0402, overdraft, url)
      const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => post(gw, ask(i % 2 === 0))))
      await Promise.all(answers.map((r) => r.arrayBuffer()))
      expect(answers.map((r) => r.status).filter((s) => s !== 200 && s !== 402)).toEqual([])
      const end = await balance(gw)
      expect(end).toBeGreaterThanOrEqual(-overdraft)
      // The upstream reported far more than credits plus overdraft: the credits are used up (and
      // some of the overdraft, when there is one), never more.
      if (overdraft === 0) expect(end).toBe(0)
      else expect(end).toBeLessThan(0)
    },
  )

  it('is set through the admin API, at creation and later, and refused when not an amount', async () => {
    const fake = await upstream({ 'POST /v1/chat/completions': overReporting })
    const gw = await gateway(fake, 1)
    const call = (method: string, url: string, body: unknown) =>
      fetch(`${gw.origin}${url}`, {
        method,
        headers: { ...admin, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
    const created = await call('POST', '/admin/accounts', { id: 'beta', credits: 1, overdraft_usd: 0.25 })
    expect(created.status).toBe(201)
    expect(((await created.json()) as { overdraft_usd: number }).overdraft_usd).toBe(0.25)
    const changed = await call('PUT', '/admin/accounts/acme/overdraft', { overdraft_usd: 0.003 })
    expect(((await changed.json()) as { overdraft_usd: number }).overdraft_usd).toBe(0.003)
    for (const bad of [{ overdraft_usd: -1 }, { overdraft_usd: 0.1234567890123 }, {}]) {
      const res = await call('PUT', '/admin/accounts/acme/overdraft', bad)
      expect(res.status).toBe(400)
      expect(((await res.json()) as { error: { param: string } }).error.param).toBe('overdraft_usd')
    }
    // In force at once: the next charge may pass its hold by $0.003.
    const res = await post(gw, ask())
    const rec = await readGeneration(gw, res.headers.get('x-generation-id') ?? '', key)
    expect(rec.usage.cost).toBe(0.00501)
  })
})

import { Writable } from 'node:stream'
import { toUsd } from '../../src/billing/money.ts'
import { afterEach, describe, expect, it } from 'vitest'
import { continueTrace } from '../../src/http/tracing.ts'
import { createLogger } from '../../src/logger.ts'
import {
  jsonFile,
  sendJson,
  sseFile,
  startFakeUpstream,
  type FakeUpstream,
} from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// What an operator sees: one log line per request, /metrics behind the admin key, and the client's
// trace continued to the upstream.

const ADMIN = 'admin-key-observability-01'
let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

async function setup() {
  const fake: FakeUpstream = await startFakeUpstream({
    'POST /v1/chat/completions': (req, res) =>
      (req.body as { stream?: boolean }).stream
        ? sseFile('openai-compat/text.sse')(req, res)
        : jsonFile('openai-compat/completion.json')(req, res),
  })
  const failing = await startFakeUpstream({
    'POST /v1/chat/completions': (_req, res) => sendJson(res, 503, { error: { message: 'busy' } }),
  })
  // Streams one chunk then holds until its client (the gateway) goes; a blocking call just holds.
  const held = await startFakeUpstream({
    'POST /v1/chat/completions': async (req, res) => {
      if ((req.body as { stream?: boolean }).stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        const chunk = {
          id: 'chatcmpl-held',
          object: 'chat.completion.chunk',
          created: 1_700_000_000,
          model: 'm',
          choices: [{ index: 0, delta: { role: 'assistant', content: 'first ' }, finish_reason: null }],
        }
        res.write(`data: ${JSON.stringify(chunk)}\n\n`)
      }
      await new Promise((resolve) => res.once('close', resolve))
    },
  })
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>)
      cb()
    },
  })
  const gw: TestGateway = await startGateway({
    listen: true,
    env: { GATEWAY_ADMIN_KEY: ADMIN },
    file: {
      providers: {
        up: { kind: 'openai-compat', baseUrl: `${fake.origin}/v1` },
        down: { kind: 'openai-compat', baseUrl: `${failing.origin}/v1`, retry: { attemptsPerDeployment: 1 } },
        held: { kind: 'openai-compat', baseUrl: `${held.origin}/v1` },
      },
      models: [
        { slug: 'team/chat', provider: 'up', upstreamModel: 'm', pricing: { prompt: 1, completion: 2 } },
        { slug: 'team/down', provider: 'down', upstreamModel: 'm' },
        { slug: 'team/held', provider: 'held', upstreamModel: 'm', pricing: { prompt: 1, completion: 2 } },
      ],
    },
    overrides: { log: createLogger('info', sink) },
  })
  closers.push(
    () => fake.close(),
    () => failing.close(),
    () => held.close(),
    () => gw.close(),
  )
  const chat = (
    model: string,
    headers: Record<string, string> = {},
    more: Record<string, unknown> = {},
    signal?: AbortSignal,
  ) =>
    fetch(`${gw.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], ...more }),
      signal,
    })
  return { fake, gw, lines, chat }
}

/** A client's abort is settled, logged and counted asynchronously: a loaded machine may take seconds. */
const SETTLED = { timeout: 15_000 }

describe('observability', () => {
  it('writes one line per request with what it did', async () => {
    const { lines, chat } = await setup()
    const res = await chat('team/chat')
    const id = res.headers.get('x-generation-id')
    await res.text()
    await expect.poll(() => lines.filter((l) => l.msg === 'request').length).toBeGreaterThan(0)
    const requestLines = lines.filter((l) => l.msg === 'request')
    expect(requestLines).toHaveLength(1)
    expect(requestLines[0]).toMatchObject({
      method: 'POST',
      route: '/v1/chat/completions',
      status: 200,
      generationId: id,
      model: 'team/chat',
      provider: 'up',
      promptTokens: 19,
      completionTokens: 10,
      cost: 0.000039,
      attempts: 1,
    })
    expect(typeof requestLines[0]!.ms).toBe('number')
    // Fastify's own two lines per request are off.
    expect(lines.some((l) => l.msg === 'incoming request' || l.msg === 'request completed')).toBe(false)
  })

  it('writes the line and counts the metrics of a stream, or a blocking call, its client abandons (499)', async () => {
    const { gw, lines, chat } = await setup()
    const aborted = new AbortController()
    const res = await chat('team/held', {}, { stream: true }, aborted.signal)
    const id = res.headers.get('x-generation-id')
    const reader = res.body!.getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('first ')
    aborted.abort()
    await expect.poll(() => lines.filter((l) => l.msg === 'request').length, SETTLED).toBe(1)
    expect(lines.find((l) => l.msg === 'request')).toMatchObject({
      route: '/v1/chat/completions',
      status: 499,
      aborted: true,
      generationId: id,
      model: 'team/held',
      provider: 'held',
    })

    // A blocking call abandoned while the upstream still thinks.
    const gone = new AbortController()
    const pending = chat('team/held', {}, {}, gone.signal).catch(() => 'aborted')
    await expect.poll(() => gw.deps.lifecycle.inFlight, SETTLED).toBe(1)
    gone.abort()
    expect(await pending).toBe('aborted')
    await expect.poll(() => lines.filter((l) => l.msg === 'request').length, SETTLED).toBe(2)
    expect(lines.filter((l) => l.msg === 'request')[1]).toMatchObject({
      status: 499,
      aborted: true,
      model: 'team/held',
    })

    const text = await (
      await fetch(`${gw.origin}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).text()
    expect(text).toMatch(
      /junction_requests_total\{route="\/v1\/chat\/completions",model="team\/held",provider="held",status="499"\} 2/,
    )
    expect(text).toMatch(/junction_open_streams 0/)
  })

  it('continues the client’s trace to the upstream, with its own span, and logs the trace id', async () => {
    const { fake, lines, chat } = await setup()
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736'
    await (await chat('team/chat', { traceparent: `00-${traceId}-00f067aa0ba902b7-01` })).text()
    const sent = fake.requests[0]!.headers.traceparent as string
    expect(sent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`))
    expect(sent).not.toContain('00f067aa0ba902b7')
    await expect.poll(() => lines.find((l) => l.msg === 'request')?.traceId).toBe(traceId)
    // A malformed header is not forwarded.
    await (await chat('team/chat', { traceparent: 'garbage' })).text()
    expect(fake.requests[1]!.headers.traceparent).toBeUndefined()
  })

  it('serves /metrics to the admin key only, with requests, tokens, cost and upstream errors', async () => {
    const { gw, chat } = await setup()
    await (await chat('team/chat')).text()
    await (await chat('team/down')).text()
    await (await chat('team/chat', {}, { stream: true })).text()
    // A busy account: this instance took holds ahead for it (billing/spare-holds.ts).
    await gw.deps.spares.idle()
    const ahead = gw.deps.spares.totals()
    expect(ahead.holds).toBeGreaterThan(0)
    const scrape = (key?: string) =>
      fetch(`${gw.origin}/metrics`, { headers: key ? { authorization: `Bearer ${key}` } : {} })
    expect((await scrape()).status).toBe(401)
    expect((await scrape('sk-dev')).status).toBe(401)
    const res = await scrape(ADMIN)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/)
    const text = await res.text()
    expect(text).toMatch(
      /junction_requests_total\{route="\/v1\/chat\/completions",model="team\/chat",provider="up",status="200"\} 2/,
    )
    // The blocking answer's 19 + 10 tokens and the stream's 9 + 1, at $1 / $2 per million.
    expect(text).toMatch(/junction_tokens_total\{model="team\/chat",kind="prompt"\} 28\n/)
    expect(text).toMatch(/junction_tokens_total\{model="team\/chat",kind="completion"\} 11\n/)
    const cost = /junction_cost_usd_total\{model="team\/chat"\} (\S+)/.exec(text)?.[1]
    expect(Number(cost)).toBeCloseTo(0.00005, 12)
    expect(text).toMatch(/junction_upstream_errors_total\{provider="down",code="upstream_error"\} 1/)
    expect(text).toMatch(/junction_open_streams 0/)
    expect(text).toMatch(/junction_reserved_credits_usd 0/)
    expect(text).toContain(`junction_spare_holds ${ahead.holds}\n`)
    expect(Number(/^junction_spare_held_usd (\S+)$/m.exec(text)?.[1])).toBeCloseTo(toUsd(ahead.amount), 12)
    expect(text).toContain('junction_time_to_first_byte_seconds_bucket')
    expect(text).toContain('junction_request_duration_seconds_bucket')
  })

  it('has no /metrics without an admin key', async () => {
    const gw = await startGateway({ listen: true })
    closers.push(() => gw.close())
    expect((await fetch(`${gw.origin}/metrics`)).status).toBe(404)
  })
})

describe('continueTrace', () => {
  it('keeps the trace id and flags, takes a new span id, refuses invalid headers', () => {
    const t = continueTrace(
      '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      () => 'a1b2c3d4e5f60718',
    )
    expect(t).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      spanId: 'a1b2c3d4e5f60718',
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-a1b2c3d4e5f60718-01',
    })
    for (const bad of [
      undefined,
      ['00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
      'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
      '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
      '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01',
    ]) {
      expect(continueTrace(bad)).toBeUndefined()
    }
  })
})

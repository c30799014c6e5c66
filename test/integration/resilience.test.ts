import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import {
  jsonFile,
  sendJson,
  sseFile,
  startFakeUpstream,
  type FakeHandler,
  type FakeUpstream,
} from '../support/fake-upstream.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// Routing and resilience through the listening gateway: several fake upstreams on 127.0.0.1, each a
// real HTTP server speaking its provider's wire format; what each received is counted at the fake.

const CHAT = 'POST /v1/chat/completions'
const ok: FakeHandler = jsonFile('openai-compat/completion.json')
const fail =
  (status: number, headers: Record<string, string> = {}): FakeHandler =>
  (_req, res) =>
    sendJson(res, status, { error: { message: `failing with ${status}`, type: 'server_error' } }, headers)
/** Never answers: the gateway's first-byte timeout ends the call. */
const silent: FakeHandler = (_req, res) => new Promise<void>((resolve) => res.once('close', () => resolve()))
/** Answers after `ms`: the measured time to first byte. */
const after =
  (ms: number, handler: FakeHandler): FakeHandler =>
  async (req, res) => {
    await new Promise((r) => setTimeout(r, ms))
    await handler(req, res)
  }

let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

async function fakes(...handlers: FakeHandler[]): Promise<FakeUpstream[]> {
  const out: FakeUpstream[] = []
  for (const h of handlers) {
    const f = await startFakeUpstream({ [CHAT]: h, 'POST /v1/embeddings': h })
    closers.push(() => f.close())
    out.push(f)
  }
  return out
}

/** A port nothing listens on any more: connections to it are refused. */
async function refusedOrigin(): Promise<string> {
  const s = createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const { port } = s.address() as AddressInfo
  await new Promise((r) => s.close(r))
  return `http://127.0.0.1:${port}`
}

async function gateway(file: Record<string, unknown>, env: Record<string, string> = {}) {
  const gw: TestGateway = await startGateway({ listen: true, file, env })
  closers.push(() => gw.close())
  const client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  return { gw, client }
}

const provider = (origin: string, more: Record<string, unknown> = {}) => ({
  kind: 'openai-compat',
  baseUrl: `${origin}/v1`,
  ...more,
})
const fastRetries = { retry: { backoffMs: 1, maxBackoffMs: 5 } }
const ask = (more: Record<string, unknown> = {}) =>
  ({
    model: 'team/chat',
    messages: [{ role: 'user', content: 'hi' }],
    ...more,
  }) as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming
const counts = (fs: FakeUpstream[]) => fs.map((f) => f.requests.length)

async function post(gw: TestGateway, body: unknown): Promise<Response> {
  return fetch(`${gw.origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}

describe('retries before the answer', () => {
  it('refused, slow, 429 and 503 deployments: the client sees one answer from the healthy one', async () => {
    const [slow, limited, busy, good] = await fakes(silent, fail(429, { 'retry-after': '30' }), fail(503), ok)
    const down = await refusedOrigin()
    const { gw } = await gateway({
      providers: {
        down: provider(down),
        slow: provider(slow!.origin, { timeouts: { firstByteMs: 200 } }),
        limited: provider(limited!.origin),
        busy: provider(busy!.origin),
        good: provider(good!.origin),
      },
      models: [
        {
          slug: 'team/chat',
          deployments: ['down', 'slow', 'limited', 'busy', 'good'].map((p) => ({
            provider: p,
            upstreamModel: 'm',
          })),
        },
      ],
      routing: { maxAttempts: 5, retry: { attemptsPerDeployment: 1, backoffMs: 1 } },
    })
    const res = await post(gw, ask())
    expect(res.status).toBe(200)
    expect(res.headers.get('x-junction-provider')).toBe('good')
    expect(res.headers.get('x-junction-attempts')).toBe('5')
    const answer = (await res.json()) as OpenAI.Chat.ChatCompletion
    expect(answer.model).toBe('team/chat')
    expect(counts([slow!, limited!, busy!, good!])).toEqual([1, 1, 1, 1])
    const record = await readGeneration(gw, answer.id)
    expect(record.provider).toBe('good')
    expect(
      record.attempts.map((a: { provider: string; status: number | null; outcome: string }) => [
        a.provider,
        a.status,
        a.outcome,
      ]),
    ).toEqual([
      ['down', null, 'upstream_error'],
      ['slow', null, 'upstream_timeout'],
      ['limited', 429, 'rate_limit_exceeded'],
      ['busy', 503, 'upstream_error'],
      ['good', 200, 'ok'],
    ])
  })

  it('a 400 from the upstream is not retried, here or elsewhere', async () => {
    const [bad, other] = await fakes(fail(400), ok)
    const { client } = await gateway({
      providers: { bad: provider(bad!.origin), other: provider(other!.origin) },
      models: [{ slug: 'team/chat', deployments: [{ provider: 'bad' }, { provider: 'other' }] }],
    })
    await expect(client.chat.completions.create(ask())).rejects.toMatchObject({ status: 400 })
    expect(counts([bad!, other!])).toEqual([1, 0])
  })

  it('the same deployment is tried again after a backoff when it is the only one', async () => {
    let n = 0
    const [flaky] = await fakes((req, res) => (++n === 1 ? fail(502)(req, res) : ok(req, res)))
    const { gw } = await gateway({
      providers: { flaky: provider(flaky!.origin, fastRetries) },
      models: [{ slug: 'team/chat', deployments: [{ provider: 'flaky' }] }],
    })
    const res = await post(gw, ask())
    expect(res.status).toBe(200)
    expect(res.headers.get('x-junction-attempts')).toBe('2')
    expect(flaky!.requests).toHaveLength(2)
  })

  it('embeddings get the same retries', async () => {
    const [busy, good] = await fakes(fail(503), jsonFile('openai-compat/completion.json'))
    good!.requests.length = 0
    const embed: FakeHandler = (_req, res) =>
      sendJson(res, 200, {
        object: 'list',
        data: [{ object: 'embedding', index: 0, embedding: [0.1, 0.2] }],
        model: 'e',
        usage: { prompt_tokens: 2, total_tokens: 2 },
      })
    const [embedder] = await fakes(embed)
    const { client } = await gateway({
      providers: {
        busy: provider(busy!.origin, { retry: { attemptsPerDeployment: 1 } }),
        good: provider(embedder!.origin),
      },
      models: [
        { slug: 'team/embed', type: 'embedding', deployments: [{ provider: 'busy' }, { provider: 'good' }] },
      ],
    })
    const res = await client.embeddings.create({ model: 'team/embed', input: 'hello' }).withResponse()
    expect(res.data.data[0]?.embedding).toEqual([0.1, 0.2])
    expect(res.response.headers.get('x-junction-provider')).toBe('good')
    expect(counts([busy!, embedder!])).toEqual([1, 1])
  })
})

describe('routing extensions', () => {
  async function three(handlers: FakeHandler[] = [ok, ok, ok], deployments: Record<string, unknown>[] = []) {
    const fs = await fakes(...handlers)
    const names = ['a', 'b', 'c']
    const { gw, client } = await gateway({
      providers: Object.fromEntries(names.map((n, i) => [n, provider(fs[i]!.origin, fastRetries)])),
      models: [
        {
          slug: 'team/chat',
          deployments: names.map((n, i) => ({
            provider: n,
            pricing: { prompt: 3 - i, completion: 3 - i },
            ...deployments[i],
          })),
        },
        {
          slug: 'team/cheap',
          deployments: [{ provider: 'c', pricing: { prompt: 0.1, completion: 0.1 } }],
          quality: 10,
        },
        {
          slug: 'team/best',
          deployments: [{ provider: 'a', pricing: { prompt: 9, completion: 9 } }],
          quality: 99,
        },
      ],
    })
    return { fs, gw, client }
  }

  it('priority follows the request’s providers list', async () => {
    const { fs, client } = await three()
    await client.chat.completions.create(
      ask({ provider: { routing: { type: 'priority', providers: ['c', 'a'] } } }),
    )
    expect(counts(fs)).toEqual([0, 0, 1])
  })

  it('round robin spreads requests evenly, counted at the upstreams', async () => {
    const { fs, client } = await three()
    for (let i = 0; i < 9; i++) {
      await client.chat.completions.create(
        ask({ provider: { routing: { type: 'round_robin', providers: ['a', 'b', 'c'] } } }),
      )
    }
    expect(counts(fs)).toEqual([3, 3, 3])
  })

  it('least latency prefers the fastest after each was measured once', async () => {
    const { fs, client } = await three([after(150, ok), ok, after(150, ok)])
    for (let i = 0; i < 8; i++) {
      await client.chat.completions.create(
        ask({ provider: { routing: { type: 'least_latency', providers: ['a', 'b', 'c'] } } }),
      )
    }
    // Warm-up measures a, b and c once each (never-measured first); then b, the fastest, takes the rest.
    expect(counts(fs)).toEqual([1, 6, 1])
  })

  it('primary_factor cost and quality order the deployments', async () => {
    const { fs, client } = await three([ok, ok, ok], [{ quality: 80 }, { quality: 20 }, {}])
    await client.chat.completions.create(
      ask({
        provider: { routing: { type: 'priority', primary_factor: 'cost', providers: ['a', 'b', 'c'] } },
      }),
    )
    expect(counts(fs)).toEqual([0, 0, 1])
    await client.chat.completions.create(
      ask({
        provider: { routing: { type: 'priority', primary_factor: 'quality', providers: ['c', 'b', 'a'] } },
      }),
    )
    expect(counts(fs)).toEqual([1, 0, 1])
  })

  it('a provider that does not serve the model is a 400 naming it, and nothing is called', async () => {
    const { fs, client } = await three()
    await expect(
      client.chat.completions.create(
        ask({ provider: { routing: { type: 'priority', providers: ['a', 'zeta'] } } }),
      ),
    ).rejects.toMatchObject({ status: 400, error: { param: 'provider.routing.providers[1]' } })
    expect(counts(fs)).toEqual([0, 0, 0])
  })

  it('fallback: when every deployment of the model fails, the fallback slug answers and is billed', async () => {
    const { fs, gw } = await three([fail(503), fail(503), ok])
    const res = await post(
      gw,
      ask({ provider: { routing: { type: 'priority', providers: ['a', 'b'] }, fallback: 'team/cheap' } }),
    )
    expect(res.status).toBe(200)
    const answer = (await res.json()) as OpenAI.Chat.ChatCompletion
    expect(answer.model).toBe('team/cheap')
    const record = await readGeneration(gw, answer.id)
    expect(record).toMatchObject({ model: 'team/cheap', provider: 'c' })
    // team/cheap's price, not team/chat's: the fixture's 19 prompt + 10 completion tokens at $0.10/M.
    expect(record.usage.upstream_cost).toBeCloseTo(((19 + 10) * 0.1) / 1e6, 12)
    // a and b failed once each; the fallback answered before a second round came to them.
    expect(counts(fs)).toEqual([1, 1, 1])
  })

  it('model_routing_config picks the model and says which', async () => {
    const { fs, client } = await three()
    const pick = async (cfg: Record<string, unknown>) =>
      (
        await client.chat.completions.create(
          ask({ model_routing_config: { available_models: ['team/best', 'team/cheap'], ...cfg } }),
        )
      ).model
    expect(await pick({ preference: 'cost' })).toBe('team/cheap')
    expect(await pick({ preference: 'quality' })).toBe('team/best')
    expect(await pick({ preference: 'team/cheap' })).toBe('team/cheap')
    expect(await pick({ task_info: { complexity: 'low' } })).toBe('team/cheap')
    expect(await pick({ task_info: { complexity: 'high' } })).toBe('team/best')
    expect(counts(fs)).toEqual([2, 0, 3])
    await expect(pick({ available_models: ['team/nope'] })).rejects.toMatchObject({
      status: 404,
      error: { param: 'model_routing_config.available_models[0]' },
    })
  })
})

describe('circuit breaking', () => {
  it('opens after repeated failures (503 without calling), probes after the cooldown, and recovers', async () => {
    let healthy = false
    const [flaky] = await fakes((req, res) => (healthy ? ok(req, res) : fail(500)(req, res)))
    const { gw } = await gateway({
      providers: { flaky: provider(flaky!.origin, { retry: { attemptsPerDeployment: 1 } }) },
      models: [{ slug: 'team/chat', deployments: [{ provider: 'flaky' }] }],
      routing: { breaker: { failureThreshold: 2, cooldownMs: 300 } },
    })
    expect((await post(gw, ask())).status).toBe(502)
    expect((await post(gw, ask())).status).toBe(502)
    const open = await post(gw, ask())
    expect(open.status).toBe(503)
    expect(((await open.json()) as { error: { code: string } }).error.code).toBe('no_available_provider')
    expect(flaky!.requests).toHaveLength(2)
    healthy = true
    // Until the cooldown ends every request is refused without a call; then one probe restores it.
    let res = await post(gw, ask())
    while (res.status === 503) {
      await res.text()
      expect(flaky!.requests).toHaveLength(2)
      await new Promise((r) => setTimeout(r, 25))
      res = await post(gw, ask())
    }
    expect(res.status).toBe(200)
    expect(flaky!.requests).toHaveLength(3)
    expect((await post(gw, ask())).status).toBe(200)
  })
})

describe('streams', () => {
  it('an Anthropic stream that fails before any content is retried unseen: one clean stream', async () => {
    const overloaded = toAnthropicSse([
      {
        type: 'message_start',
        message: {
          id: 'msg_1',
          type: 'message',
          role: 'assistant',
          content: [],
          model: 'claude-sonnet-4-5',
          stop_reason: null,
          usage: { input_tokens: 5, output_tokens: 1 },
        },
      },
      { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } },
    ])
    const first = await startFakeUpstream({
      'POST /v1/messages': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(overloaded)
      },
    })
    const second = await startFakeUpstream({ 'POST /v1/messages': sseFile('anthropic/text.sse') })
    closers.push(
      () => first.close(),
      () => second.close(),
    )
    const { client } = await gateway(
      {
        providers: {
          one: {
            kind: 'anthropic',
            baseUrl: first.origin,
            apiKeyEnv: 'TEST_ANTHROPIC_KEY',
            retry: { attemptsPerDeployment: 1 },
          },
          two: { kind: 'anthropic', baseUrl: second.origin, apiKeyEnv: 'TEST_ANTHROPIC_KEY' },
        },
        models: [
          {
            slug: 'team/chat',
            deployments: [
              { provider: 'one', upstreamModel: 'claude' },
              { provider: 'two', upstreamModel: 'claude' },
            ],
          },
        ],
      },
      { TEST_ANTHROPIC_KEY: 'test-key-not-real' },
    )
    const stream = await client.chat.completions.create({ ...ask(), stream: true })
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = []
    for await (const c of stream) chunks.push(c)
    expect(chunks.filter((c) => c.choices[0]?.delta.role === 'assistant')).toHaveLength(1)
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Hello!')
    expect(chunks.at(-1)?.choices[0]?.finish_reason ?? chunks.at(-2)?.choices[0]?.finish_reason).toBe('stop')
    expect([first.requests.length, second.requests.length]).toEqual([1, 1])
  })

  it('a failure after content ends the stream with an error event, and nothing else is called', async () => {
    const cut: FakeHandler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(
        'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Par"},"finish_reason":null}]}\n\n',
      )
      setTimeout(() => res.socket?.destroy(), 20)
    }
    const [first, second] = await fakes(cut, ok)
    const { gw } = await gateway({
      providers: { one: provider(first!.origin), two: provider(second!.origin) },
      models: [{ slug: 'team/chat', deployments: [{ provider: 'one' }, { provider: 'two' }] }],
    })
    const res = await post(gw, { ...ask(), stream: true })
    expect(res.status).toBe(200)
    const text = await res.text()
    expect(text).toContain('"content":"Par"')
    expect(text).toMatch(/data: \{"error":/)
    expect(text).not.toContain('[DONE]')
    expect(counts([first!, second!])).toEqual([1, 0])
  })

  it('a failure after content counts against the deployment’s breaker', async () => {
    const cut: FakeHandler = (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(
        'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Par"},"finish_reason":null}]}\n\n',
      )
      setTimeout(() => res.socket?.destroy(), 20)
    }
    const [first, second] = await fakes(cut, ok)
    const { gw } = await gateway({
      providers: { one: provider(first!.origin), two: provider(second!.origin) },
      models: [{ slug: 'team/chat', deployments: [{ provider: 'one' }, { provider: 'two' }] }],
      routing: { breaker: { failureThreshold: 1, cooldownMs: 60_000 } },
    })
    expect(await (await post(gw, { ...ask(), stream: true })).text()).toMatch(/data: \{"error":/)
    // The breaker opened on that failure: the next request goes straight to the other deployment.
    const res = await post(gw, ask())
    expect(res.status).toBe(200)
    expect(res.headers.get('x-junction-provider')).toBe('two')
    expect(counts([first!, second!])).toEqual([1, 1])
  })
})

import type { ServerResponse } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import {
  sendJson,
  sendSse,
  startFakeUpstream,
  type FakeHandler,
  type FakeUpstream,
} from '../support/fake-upstream.ts'
import { devAuth, readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'
import type { ChatCompletion, EmbeddingsResponse } from '../../src/domain/chat.ts'

// The real gateway, listening, in front of a fake OpenAI-compatible upstream on 127.0.0.1, driven
// by plain fetch as a client would.

const UPSTREAM_KEY = 'sk-test-upstream-secret-123456'
const CHAT_SLUG = 'openai/gpt-4o-mini'
const EMBED_SLUG = 'openai/text-embedding-3-small'
const GENERATION_ID = /^gen-[A-Za-z0-9_-]{24,}$/

interface Setup {
  fake: FakeUpstream
  gw: TestGateway
}

const cleanups: (() => Promise<void>)[] = []

afterEach(async () => {
  // The fake goes first: its closeAllConnections ends any upstream request the gateway still holds.
  for (const c of cleanups.splice(0).reverse()) await c()
})

/** A fake upstream with `routes` and a listening gateway whose `openai` provider points at it. */
async function setup(
  routes: Record<string, FakeHandler>,
  file?: (origin: string) => unknown,
): Promise<Setup> {
  const fake = await startFakeUpstream(routes)
  const env: Record<string, string> = { OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${fake.origin}/v1` }
  let gw: TestGateway
  try {
    gw = await startGateway({ env, file: file?.(fake.origin), listen: true })
  } catch (err) {
    await fake.close()
    throw err
  }
  cleanups.push(
    () => gw.close(),
    () => fake.close(),
  )
  return { fake, gw }
}

/** A config file whose `openai` provider has the given timeouts. */
const withTimeouts =
  (timeouts: Record<string, number>) =>
  (origin: string): unknown => ({
    providers: {
      openai: {
        kind: 'openai-compat',
        baseUrl: `${origin}/v1`,
        apiKeyEnv: 'OPENAI_API_KEY',
        timeouts,
      },
    },
  })

function post(gw: TestGateway, path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${gw.origin}${path}`, {
    method: 'POST',
    headers: { ...devAuth, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  })
}

const hello = { model: CHAT_SLUG, messages: [{ role: 'user', content: 'Say hello' }] }

function upstreamCompletion(content: string): Record<string, unknown> {
  return {
    id: 'chatcmpl-upstream-1',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'gpt-4o-mini-2024-07-18',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, refusal: null },
        logprobs: null,
        finish_reason: 'stop',
      },
    ],
    usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 },
    system_fingerprint: 'fp_upstream',
  }
}

/** One OpenAI chunk as the SSE payload the upstream sends. */
function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return JSON.stringify({
    id: 'chatcmpl-upstream-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini-2024-07-18',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })
}

const usageChunk = JSON.stringify({
  id: 'chatcmpl-upstream-1',
  object: 'chat.completion.chunk',
  created: 1_700_000_000,
  model: 'gpt-4o-mini-2024-07-18',
  choices: [],
  usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
})

/** What a real OpenAI stream with include_usage looks like: role, content pieces, finish, usage, [DONE]. */
const fullStream = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hel' }),
  chunk({ content: 'lo' }),
  chunk({}, 'stop'),
  usageChunk,
  '[DONE]',
]

/** Writes one SSE event and resolves once it has been handed to the socket. */
function writeEvent(res: ServerResponse, payload: string): Promise<void> {
  return new Promise((resolve, reject) =>
    res.write(`data: ${payload}\n\n`, (err) => (err ? reject(err) : resolve())),
  )
}

function startSse(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  res.flushHeaders()
}

/** Resolves when the gateway (the fake's peer) closes the connection. */
function closed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) resolve()
    else res.once('close', () => resolve())
  })
}

/** Reads SSE `data:` payloads from a fetch response one at a time; undefined at the end of the body. */
function sseReader(res: Response): { next(): Promise<string | undefined> } {
  if (!res.body) throw new Error('response has no body')
  const reader = res.body.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  const ready: string[] = []
  return {
    async next() {
      for (;;) {
        const queued = ready.shift()
        if (queued !== undefined) return queued
        const { value, done } = await reader.read()
        if (done) return undefined
        buffer += decoder.decode(value, { stream: true })
        let end: number
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end)
          buffer = buffer.slice(end + 2)
          const data = block
            .split('\n')
            .filter((line) => line.startsWith('data:'))
            .map((line) => line.slice(5).replace(/^ /, ''))
          if (data.length > 0) ready.push(data.join('\n'))
        }
      }
    },
  }
}

async function readAllEvents(res: Response): Promise<string[]> {
  const reader = sseReader(res)
  const out: string[] = []
  for (let e = await reader.next(); e !== undefined; e = await reader.next()) out.push(e)
  return out
}

/** Rejects with `message` unless `promise` settles within `ms`. The timer is cleared either way. */
async function within<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void
  const promise = new Promise<void>((r) => {
    resolve = r
  })
  return { promise, resolve }
}

interface ErrorEnvelope {
  error: { message: string; type: string; code: string; param: string | null }
}

describe('openai-compat upstream: blocking chat', () => {
  it('answers with the generation id and the slug, and forwards the request in upstream terms', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(res, 200, upstreamCompletion('Hello from upstream')),
    })
    const body = {
      ...hello,
      temperature: 0.5,
      // A field Junction has never heard of: forwarded unchanged (docs/design/decisions.md, forward compatibility).
      future_knob: { nested: [1, 'two', { three: true }] },
      // Gateway-only extension: never sent upstream.
      provider: { routing: { type: 'priority', providers: ['openai'] } },
    }
    const res = await post(gw, '/v1/chat/completions', body)
    expect(res.status).toBe(200)
    const answer = (await res.json()) as ChatCompletion
    const generationId = res.headers.get('x-generation-id')
    expect(generationId).toMatch(GENERATION_ID)
    expect(answer.id).toBe(generationId)
    expect(answer.model).toBe(CHAT_SLUG)
    expect(answer.object).toBe('chat.completion')
    expect(answer.choices[0]!.message).toMatchObject({ role: 'assistant', content: 'Hello from upstream' })
    expect(answer.choices[0]!.finish_reason).toBe('stop')
    expect(answer.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 })

    expect(fake.requests).toHaveLength(1)
    const sent = fake.requests[0]!
    expect(sent.path).toBe('/v1/chat/completions')
    expect(sent.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`)
    const sentBody = sent.body as Record<string, unknown>
    expect(sentBody.model).toBe('gpt-4o-mini')
    expect(sentBody.messages).toEqual(hello.messages)
    expect(sentBody.temperature).toBe(0.5)
    expect(sentBody.future_knob).toEqual(body.future_knob)
    expect(sentBody).not.toHaveProperty('provider')
  })

  it('serves the routed path the same way', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => sendJson(res, 200, upstreamCompletion('routed hi')),
    })
    const res = await post(gw, '/routed/v1/chat/completions', hello)
    expect(res.status).toBe(200)
    const answer = (await res.json()) as ChatCompletion
    expect(answer.id).toBe(res.headers.get('x-generation-id'))
    expect(answer.id).toMatch(GENERATION_ID)
    expect(answer.model).toBe(CHAT_SLUG)
    expect(answer.choices[0]!.message.content).toBe('routed hi')
    expect((fake.requests[0]!.body as Record<string, unknown>).model).toBe('gpt-4o-mini')
  })
})

describe('openai-compat upstream: streaming chat', () => {
  it('passes events on as they arrive, with the generation id, and no usage chunk unless asked', async () => {
    const firstRead = deferred()
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        startSse(res)
        await writeEvent(res, chunk({ role: 'assistant', content: 'Hel' }))
        // The rest is held back until the client has seen the first chunk: a buffering gateway deadlocks here.
        await Promise.race([firstRead.promise, closed(res)])
        if (res.destroyed) return
        for (const p of [chunk({ content: 'lo' }), chunk({}, 'stop'), usageChunk, '[DONE]'])
          await writeEvent(res, p)
        res.end()
      },
    })
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/)
    const generationId = res.headers.get('x-generation-id')
    expect(generationId).toMatch(GENERATION_ID)

    const reader = sseReader(res)
    const first = await within(
      reader.next(),
      5_000,
      'the first chunk did not reach the client while upstream held the rest',
    )
    expect(JSON.parse(first!).choices[0].delta.content).toBe('Hel')
    firstRead.resolve()

    const events = [first!]
    for (let e = await reader.next(); e !== undefined; e = await reader.next()) events.push(e)
    expect(events.at(-1)).toBe('[DONE]')
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e))
    for (const c of chunks) {
      expect(c.id).toBe(generationId)
      expect(c.model).toBe(CHAT_SLUG)
      expect(c.object).toBe('chat.completion.chunk')
    }
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello')
    expect(chunks.at(-1).choices[0].finish_reason).toBe('stop')
    // The client did not ask for usage: no chunk with `choices: []`, and no usage anywhere.
    expect(chunks.some((c) => c.choices.length === 0)).toBe(false)
    // (The upstream sends `"usage": null` on each chunk: the field is left out, not sent as null.)
    expect(chunks.some((c) => 'usage' in c)).toBe(false)

    // Usage is always requested upstream (billing needs it).
    const sent = fake.requests[0]!.body as Record<string, unknown>
    expect(sent.stream).toBe(true)
    expect(sent.stream_options).toEqual({ include_usage: true })
    expect(sent.model).toBe('gpt-4o-mini')
  })

  it('passes the usage chunk on before [DONE] when the client asked for it', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => sendSse(res, fullStream),
    })
    const res = await post(gw, '/routed/v1/chat/completions', {
      ...hello,
      stream: true,
      stream_options: { include_usage: true },
    })
    expect(res.status).toBe(200)
    const generationId = res.headers.get('x-generation-id')
    const events = await readAllEvents(res)
    expect(events.at(-1)).toBe('[DONE]')
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e))
    for (const c of chunks) expect(c.id).toBe(generationId)
    const last = chunks.at(-1)
    expect(last.choices).toEqual([])
    expect(last.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 })
    expect(chunks.slice(0, -1).every((c) => c.choices.length === 1)).toBe(true)
    expect((fake.requests[0]!.body as Record<string, unknown>).stream_options).toEqual({
      include_usage: true,
    })
  })
})

describe('openai-compat upstream: usage', () => {
  it('bills the usage a stream reports even without completion_tokens (some servers leave it out)', async () => {
    const promptOnly = JSON.stringify({
      id: 'chatcmpl-upstream-1',
      object: 'chat.completion.chunk',
      created: 1_700_000_000,
      model: 'gpt-4o-mini-2024-07-18',
      choices: [],
      usage: { prompt_tokens: 7, total_tokens: 7 },
    })
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendSse(res, [chunk({ role: 'assistant', content: '' }), chunk({}, 'stop'), promptOnly, '[DONE]']),
    })
    const res = await post(gw, '/v1/chat/completions', {
      ...hello,
      stream: true,
      stream_options: { include_usage: true },
    })
    expect(res.status).toBe(200)
    const events = await readAllEvents(res)
    expect(events.at(-1)).toBe('[DONE]')
    expect(JSON.parse(events.at(-2)!).usage).toEqual({
      prompt_tokens: 7,
      completion_tokens: 0,
      total_tokens: 7,
    })

    const rec = await readGeneration(gw, res.headers.get('x-generation-id')!)
    expect(rec).toMatchObject({
      cost_source: 'upstream',
      usage: { prompt_tokens: 7, completion_tokens: 0, total_tokens: 7 },
    })
  })
})

describe('openai-compat upstream: error responses', () => {
  it('maps an upstream 500 to 502 upstream_error', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(res, 500, { error: { message: 'The server had an error', type: 'server_error' } }),
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    const body = (await res.json()) as ErrorEnvelope
    expect(body.error).toMatchObject({ type: 'upstream_error', code: 'upstream_error', param: null })
    expect(body.error.message).toContain('500')
  })

  it('maps an upstream 429 to 429 rate_limit_error and passes Retry-After on', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(
          res,
          429,
          { error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded' } },
          { 'retry-after': '7' },
        ),
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(429)
    expect(res.headers.get('retry-after')).toBe('7')
    expect(res.headers.get('x-ratelimit-scope')).toBe('upstream')
    const body = (await res.json()) as ErrorEnvelope
    expect(body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' })
  })

  it('fails a stream whose upstream answers 429 as a plain HTTP 429, not a 200 stream', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(
          res,
          429,
          { error: { message: 'Rate limit reached', type: 'requests' } },
          { 'retry-after': '3' },
        ),
    })
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(429)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(res.headers.get('retry-after')).toBe('3')
    expect(((await res.json()) as ErrorEnvelope).error.type).toBe('rate_limit_error')
  })

  it("returns an upstream 400 as 400 with the provider's message", async () => {
    const upstreamMessage = "Invalid value for 'logit_bias': token 99999999 is out of range."
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(res, 400, {
          error: { message: upstreamMessage, type: 'invalid_request_error', param: 'logit_bias', code: null },
        }),
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(400)
    const body = (await res.json()) as ErrorEnvelope
    expect(body.error.type).toBe('invalid_request_error')
    expect(body.error.message).toContain(upstreamMessage)
  })

  it('never echoes the upstream key or a bearer header from an upstream error body', async () => {
    const leaky = `Incorrect request from key ${UPSTREAM_KEY} (header: Bearer ${UPSTREAM_KEY}); see Authorization: Bearer abc.def.ghi`
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(res, 400, { error: { message: leaky, type: 'invalid_request_error' } }),
    })
    const res400 = await post(gw, '/v1/chat/completions', hello)
    expect(res400.status).toBe(400)
    const text400 = await res400.text()
    expect(text400).not.toContain(UPSTREAM_KEY)
    expect(text400).not.toMatch(/Bearer (?!\[redacted\])/)
    expect(text400).not.toContain('abc.def.ghi')
    // The useful, non-secret part of the message survives.
    expect((JSON.parse(text400) as ErrorEnvelope).error.message).toContain('Incorrect request from key')

    fake.setHandler('POST /v1/chat/completions', (_req, res) =>
      sendJson(res, 500, { error: { message: leaky, type: 'server_error' } }),
    )
    const res500 = await post(gw, '/v1/chat/completions', hello)
    expect(res500.status).toBe(502)
    const text500 = await res500.text()
    expect(text500).not.toContain(UPSTREAM_KEY)
    expect(text500).not.toContain('Bearer')
  })

  it("maps an upstream 401 to 502 without mentioning the gateway's key", async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendJson(res, 401, {
          error: {
            message: `Incorrect API key provided: ${UPSTREAM_KEY}. You can find your API key at https://platform.openai.com/account/api-keys.`,
            type: 'invalid_request_error',
            code: 'invalid_api_key',
          },
        }),
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    const text = await res.text()
    const body = JSON.parse(text) as ErrorEnvelope
    expect(body.error).toMatchObject({ type: 'upstream_error', code: 'upstream_error' })
    expect(text).not.toContain(UPSTREAM_KEY)
    expect(text).not.toContain('sk-test')
    expect(body.error.message).not.toContain('Incorrect API key')
  })

  it('maps a 200 whose body is not JSON to 502', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end('{not json')
      },
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({
      type: 'upstream_error',
      code: 'upstream_error',
    })
  })

  it('maps a connection reset before the answer to 502 upstream_error', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.socket?.destroy()
      },
    })
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({
      type: 'upstream_error',
      code: 'upstream_error',
    })
    // A reset is retried like any failure the upstream may not repeat: once more on the same
    // deployment (routing.retry.attemptsPerDeployment is 2 by default), then the last failure answers.
    expect(fake.requests).toHaveLength(2)
  })
})

describe('openai-compat upstream: failures after the stream started', () => {
  it('sends the chunks so far, then one error event and no [DONE], when the upstream connection is cut', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        startSse(res)
        await writeEvent(res, chunk({ role: 'assistant', content: 'one ' }))
        await writeEvent(res, chunk({ content: 'two ' }))
        res.socket?.destroy()
      },
    })
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(200)
    const events = await readAllEvents(res)
    expect(events).toHaveLength(3)
    expect(events).not.toContain('[DONE]')
    expect(JSON.parse(events[0]!).choices[0].delta.content).toBe('one ')
    expect(JSON.parse(events[1]!).choices[0].delta.content).toBe('two ')
    const error = JSON.parse(events[2]!) as ErrorEnvelope
    expect(error.error).toMatchObject({ type: 'upstream_error', code: 'upstream_error' })
  })

  it('turns an upstream error event mid-stream into one error event, without secrets, and no [DONE]', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) =>
        sendSse(res, [
          chunk({ role: 'assistant', content: 'one ' }),
          chunk({ content: 'two ' }),
          JSON.stringify({
            error: { message: `overloaded; key ${UPSTREAM_KEY}`, type: 'server_error', code: null },
          }),
          chunk({ content: 'never' }, 'stop'),
          '[DONE]',
        ]),
    })
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(200)
    const events = await readAllEvents(res)
    expect(events).toHaveLength(3)
    expect(events).not.toContain('[DONE]')
    expect(JSON.parse(events[1]!).choices[0].delta.content).toBe('two ')
    expect((JSON.parse(events[2]!) as ErrorEnvelope).error).toMatchObject({ type: 'upstream_error' })
    expect(events.join('\n')).not.toContain(UPSTREAM_KEY)
  })
})

describe('openai-compat upstream: timeouts', () => {
  it('answers 504 timeout_error when the upstream sends nothing within firstByteMs', async () => {
    const { fake, gw } = await setup(
      { 'POST /v1/chat/completions': (_req, res) => closed(res) },
      withTimeouts({ firstByteMs: 300 }),
    )
    const res = await post(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(504)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({
      type: 'timeout_error',
      code: 'upstream_timeout',
    })
    // Tried again once after a backoff (the default retry policy), then answered with the timeout.
    expect(fake.requests).toHaveLength(2)
  })

  it('answers 504 before a stream starts when the upstream sends nothing within firstByteMs', async () => {
    const { gw } = await setup(
      { 'POST /v1/chat/completions': (_req, res) => closed(res) },
      withTimeouts({ firstByteMs: 300 }),
    )
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(504)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(((await res.json()) as ErrorEnvelope).error.code).toBe('upstream_timeout')
  })

  it('ends a stream with a timeout error event when the upstream goes quiet for idleMs', async () => {
    const { gw } = await setup(
      {
        'POST /v1/chat/completions': async (_req, res) => {
          startSse(res)
          await writeEvent(res, chunk({ role: 'assistant', content: 'only this' }))
          await closed(res)
        },
      },
      withTimeouts({ idleMs: 300 }),
    )
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true })
    expect(res.status).toBe(200)
    const events = await readAllEvents(res)
    expect(events).toHaveLength(2)
    expect(JSON.parse(events[0]!).choices[0].delta.content).toBe('only this')
    expect((JSON.parse(events[1]!) as ErrorEnvelope).error).toMatchObject({
      type: 'timeout_error',
      code: 'upstream_timeout',
    })
  })
})

describe('openai-compat upstream: client disconnect', () => {
  it('aborts the upstream stream when the client goes away mid-stream', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        let gone = false
        res.once('close', () => {
          gone = true
        })
        startSse(res)
        // An endless answer: one chunk every 100 ms until the gateway hangs up.
        for (let i = 0; !gone; i++) {
          res.write(`data: ${chunk({ content: `tick ${i} ` })}\n\n`)
          await new Promise((r) => setTimeout(r, 100))
        }
      },
    })
    const client = new AbortController()
    const res = await post(gw, '/v1/chat/completions', { ...hello, stream: true }, client.signal)
    expect(res.status).toBe(200)
    const first = await sseReader(res).next()
    expect(JSON.parse(first!).choices[0].delta.content).toBe('tick 0 ')

    const upstreamAborted = fake.nextAbort()
    client.abort()
    // Waits for the event itself: a gateway that never aborts fails on the test's timeout.
    await upstreamAborted
    expect(fake.abortedResponses).toBe(1)
  })

  it('aborts a blocking upstream request when the client goes away', async () => {
    const received = deferred()
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        received.resolve()
        await closed(res) // never answers
      },
    })
    const client = new AbortController()
    const pending = post(gw, '/v1/chat/completions', hello, client.signal).catch((err: unknown) => err)
    await within(received.promise, 5_000, 'the request never reached the upstream')

    const upstreamAborted = fake.nextAbort()
    client.abort()
    await upstreamAborted
    expect(fake.abortedResponses).toBe(1)
    expect((await pending) as Error).toHaveProperty('name', 'AbortError')
  })
})

describe('openai-compat upstream: embeddings', () => {
  const embeddingsHandler: FakeHandler = (req, res) => {
    const input = (req.body as { input: string | string[] }).input
    const texts = typeof input === 'string' ? [input] : input
    sendJson(res, 200, {
      object: 'list',
      data: texts.map((_, index) => ({ object: 'embedding', index, embedding: [0.6, 0.8, index] })),
      model: 'text-embedding-3-small',
      usage: { prompt_tokens: texts.length * 2, total_tokens: texts.length * 2 },
    })
  }

  it('embeds a string via /routed/v1/embeddings, forwarding every optional field unchanged', async () => {
    const { fake, gw } = await setup({ 'POST /v1/embeddings': embeddingsHandler })
    const body = {
      model: EMBED_SLUG,
      input: 'The food was delicious',
      dimensions: 3,
      encoding_format: 'float',
      input_type: 'search_query',
      user: 'user-42',
      future_knob: 'kept',
    }
    const res = await post(gw, '/routed/v1/embeddings', body)
    expect(res.status).toBe(200)
    const answer = (await res.json()) as EmbeddingsResponse
    expect(answer).toMatchObject({
      object: 'list',
      model: EMBED_SLUG,
      data: [{ object: 'embedding', index: 0, embedding: [0.6, 0.8, 0] }],
      usage: { prompt_tokens: 2, total_tokens: 2 },
    })
    expect(fake.requests).toHaveLength(1)
    expect(fake.requests[0]!.path).toBe('/v1/embeddings')
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`)
    expect(fake.requests[0]!.body).toEqual({ ...body, model: 'text-embedding-3-small' })
  })

  it('embeds an array via /v1/embeddings, one vector per input in order', async () => {
    const { fake, gw } = await setup({ 'POST /v1/embeddings': embeddingsHandler })
    const body = { model: EMBED_SLUG, input: ['first', 'second'], dimensions: 3, user: 'user-7' }
    const res = await post(gw, '/v1/embeddings', body)
    expect(res.status).toBe(200)
    expect(res.headers.get('x-generation-id')).toMatch(GENERATION_ID)
    const answer = (await res.json()) as EmbeddingsResponse
    expect(answer.model).toBe(EMBED_SLUG)
    expect(answer.data.map((d) => d.index)).toEqual([0, 1])
    expect(answer.data[1]!.embedding).toEqual([0.6, 0.8, 1])
    expect(fake.requests[0]!.body).toEqual({ ...body, model: 'text-embedding-3-small' })
  })
})

describe('openai-compat upstream: validation comes first', () => {
  it('rejects a bad chat request with 400 without calling the upstream', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => sendJson(res, 200, upstreamCompletion('should not happen')),
    })
    const res = await post(gw, '/v1/chat/completions', { ...hello, temperature: 2.5 })
    expect(res.status).toBe(400)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({
      type: 'invalid_request_error',
      param: 'temperature',
    })
    const streamed = await post(gw, '/v1/chat/completions', { ...hello, stream: true, temperature: 2.5 })
    expect(streamed.status).toBe(400)
    await streamed.body?.cancel()
    expect(fake.requests).toHaveLength(0)
  })

  it('rejects a bad embeddings request with 400 without calling the upstream', async () => {
    const { fake, gw } = await setup({ 'POST /v1/embeddings': (_req, res) => sendJson(res, 500, {}) })
    const res = await post(gw, '/routed/v1/embeddings', { model: EMBED_SLUG, input: 'x', dimensions: 0 })
    expect(res.status).toBe(400)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({
      type: 'invalid_request_error',
      param: 'dimensions',
    })
    expect(fake.requests).toHaveLength(0)
  })

  it.each([
    ['dimensions above 65 536', { input: 'x', dimensions: 65_537 }, 'dimensions'],
    ['more than 2 048 inputs', { input: Array(2049).fill('x') }, 'input'],
  ])('refuses %s with 400 without calling the upstream', async (_, fields, param) => {
    const { fake, gw } = await setup({ 'POST /v1/embeddings': (_req, res) => sendJson(res, 500, {}) })
    const res = await post(gw, '/v1/embeddings', { model: EMBED_SLUG, ...fields })
    expect(res.status).toBe(400)
    expect(((await res.json()) as ErrorEnvelope).error).toMatchObject({ code: 'invalid_value', param })
    expect(fake.requests).toHaveLength(0)
  })
})

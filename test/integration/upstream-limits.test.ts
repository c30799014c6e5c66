import type { ServerResponse } from 'node:http'
import { brotliCompressSync, createGzip, deflateSync, gzipSync } from 'node:zlib'
import { describe, expect, it, onTestFinished } from 'vitest'
import { startFakeUpstream, type FakeHandler, type FakeUpstream } from '../support/fake-upstream.ts'
import { postJson, startGateway, type TestGateway } from '../support/gateway.ts'

// Limits on what the gateway takes from an upstream, through the listening gateway in front of a
// fake OpenAI-compatible upstream: how many bytes of a blocking answer, how long a call lasts in
// all, how big one stream event is, and which content encodings are decoded.

const UPSTREAM_KEY = 'sk-test-upstream-secret-123456'
const hello = { model: 'openai/gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello' }] }
const streamHello = { ...hello, stream: true }

interface ErrorEnvelope {
  error: { message: string; type: string; code: string; param: string | null }
}

/** A fake upstream with `routes`, and a listening gateway whose `openai` provider points at it with `settings`. */
async function setup(
  routes: Record<string, FakeHandler>,
  settings: Record<string, unknown> = {},
): Promise<{ fake: FakeUpstream; gw: TestGateway }> {
  const fake = await startFakeUpstream(routes)
  const file = {
    providers: {
      openai: {
        kind: 'openai-compat',
        baseUrl: `${fake.origin}/v1`,
        apiKeyEnv: 'OPENAI_API_KEY',
        ...settings,
      },
    },
  }
  const gw = await startGateway({ env: { OPENAI_API_KEY: UPSTREAM_KEY }, file, listen: true }).catch(
    async (err: unknown) => {
      await fake.close()
      throw err
    },
  )
  onTestFinished(async () => {
    // The fake goes first: its closeAllConnections ends any upstream request the gateway still holds.
    await fake.close()
    await gw.close()
  })
  return { fake, gw }
}

function completion(content: string): Record<string, unknown> {
  return {
    id: 'chatcmpl-upstream-1',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'gpt-4o-mini-2024-07-18',
    choices: [{ index: 0, message: { role: 'assistant', content }, logprobs: null, finish_reason: 'stop' }],
    usage: { prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 },
  }
}

function chunk(delta: Record<string, unknown>, finish: string | null = null): string {
  return JSON.stringify({
    id: 'chatcmpl-upstream-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini-2024-07-18',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })
}

const fullStream = [
  chunk({ role: 'assistant', content: '' }),
  chunk({ content: 'Hel' }),
  chunk({ content: 'lo' }),
  chunk({}, 'stop'),
  '[DONE]',
]

/** Writes `text` and resolves once it is handed to the socket (or the peer is gone). */
function write(res: ServerResponse, text: string | Buffer): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) resolve()
    else res.write(text, () => resolve())
  })
}

/** Writes `next()` over and over, as fast as the gateway reads, until the gateway hangs up. */
async function writeForever(res: ServerResponse, next: (i: number) => string): Promise<void> {
  for (let i = 0; !res.destroyed; i++) await write(res, next(i))
}

/** Writes `text` every `ms` until the gateway hangs up: an upstream that never goes quiet. */
async function trickleForever(res: ServerResponse, text: (i: number) => string, ms: number): Promise<void> {
  for (let i = 0; !res.destroyed; i++) {
    await write(res, text(i))
    await new Promise((r) => setTimeout(r, ms))
  }
}

function startSse(res: ServerResponse, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers })
  res.flushHeaders()
}

/** The `data:` payloads of an SSE response, to its end. */
async function readEvents(res: Response): Promise<string[]> {
  const text = await res.text()
  return text
    .split('\n\n')
    .map((block) =>
      block
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).replace(/^ /, ''))
        .join('\n'),
    )
    .filter((data) => data !== '')
}

async function errorOf(res: Response): Promise<ErrorEnvelope['error']> {
  return ((await res.json()) as ErrorEnvelope).error
}

describe('a blocking answer is read up to maxResponseBytes', () => {
  it('answers 502 and drops the upstream connection when a 200 JSON body never ends', async () => {
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': async (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' })
          await write(res, '{"id":"chatcmpl-1","choices":[{"message":{"content":"')
          await writeForever(res, () => 'a'.repeat(16 * 1024))
        },
      },
      { maxResponseBytes: 65_536 },
    )
    const upstreamAborted = fake.nextAbort()
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect(await errorOf(res)).toMatchObject({
      type: 'upstream_error',
      code: 'upstream_error',
      message: 'upstream openai: response larger than 65536 bytes',
    })
    await upstreamAborted
    expect(fake.abortedResponses).toBe(1)
  })

  it('takes a body of exactly maxResponseBytes and refuses one byte more', async () => {
    const body = JSON.stringify(completion('Hello'))
    const padded = (size: number) => body + ' '.repeat(size - body.length)
    let size = 0
    const { gw } = await setup(
      {
        'POST /v1/chat/completions': (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(padded(size))
        },
      },
      { maxResponseBytes: 4_096 },
    )
    size = 4_096
    const ok = await postJson(gw, '/v1/chat/completions', hello)
    expect(ok.status).toBe(200)
    expect(
      ((await ok.json()) as { choices: { message: { content: string } }[] }).choices[0]?.message.content,
    ).toBe('Hello')
    size = 4_097
    const tooLong = await postJson(gw, '/v1/chat/completions', hello)
    expect(tooLong.status).toBe(502)
    expect((await errorOf(tooLong)).message).toBe('upstream openai: response larger than 4096 bytes')
  })

  it('applies to embeddings answers too', async () => {
    const { gw } = await setup(
      {
        'POST /v1/embeddings': async (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' })
          await write(res, '{"object":"list","data":[{"object":"embedding","index":0,"embedding":[')
          await writeForever(res, () => '0.0023064255,'.repeat(1_000))
        },
      },
      { maxResponseBytes: 100_000 },
    )
    const res = await postJson(gw, '/v1/embeddings', { model: 'openai/text-embedding-3-small', input: 'hi' })
    expect(res.status).toBe(502)
    expect((await errorOf(res)).message).toBe('upstream openai: response larger than 100000 bytes')
  })

  it('counts the decompressed bytes: a small gzip body that inflates past the limit is refused', async () => {
    const inflated = Buffer.from(JSON.stringify(completion('x'.repeat(1024 * 1024))))
    const compressed = gzipSync(inflated)
    expect(compressed.length).toBeLessThan(65_536)
    const { gw } = await setup(
      {
        'POST /v1/chat/completions': (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
          res.end(compressed)
        },
      },
      { maxResponseBytes: 65_536 },
    )
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect((await errorOf(res)).message).toBe('upstream openai: response larger than 65536 bytes')
  })
})

describe('no upstream call lasts longer than timeouts.totalMs', () => {
  const timedOut = {
    type: 'timeout_error',
    code: 'upstream_timeout',
    message: 'upstream openai timed out (total)',
  }

  it('answers 504 when a blocking body keeps coming, a byte at a time, past totalMs', async () => {
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': async (_req, res) => {
          res.writeHead(200, { 'content-type': 'application/json' })
          await trickleForever(res, () => ' ', 10)
        },
      },
      { timeouts: { totalMs: 300 } },
    )
    const upstreamAborted = fake.nextAbort()
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(504)
    expect(await errorOf(res)).toMatchObject(timedOut)
    await upstreamAborted
  })

  it('answers 504 when the upstream sends no headers within totalMs, whatever firstByteMs allows', async () => {
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': (_req, res) =>
          new Promise<void>((resolve) => res.once('close', () => resolve())),
      },
      { timeouts: { totalMs: 300, firstByteMs: 600_000 } },
    )
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(504)
    expect(await errorOf(res)).toMatchObject(timedOut)
    // One retry of the same deployment (the default policy), each call cut at totalMs.
    expect(fake.requests).toHaveLength(2)
  })

  it('answers a plain HTTP 504 when a stream sends only comments until totalMs', async () => {
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': async (_req, res) => {
          startSse(res)
          await trickleForever(res, () => ': ping\n\n', 10)
        },
      },
      { timeouts: { totalMs: 300 } },
    )
    const upstreamAborted = fake.nextAbort()
    const res = await postJson(gw, '/v1/chat/completions', streamHello)
    expect(res.status).toBe(504)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    expect(await errorOf(res)).toMatchObject(timedOut)
    await upstreamAborted
  })

  it('ends a stream that keeps sending with one timeout error event and no [DONE]', async () => {
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': async (_req, res) => {
          startSse(res)
          await trickleForever(res, (i) => `data: ${chunk({ content: `tick ${i} ` })}\n\n`, 10)
        },
      },
      { timeouts: { totalMs: 300 } },
    )
    const upstreamAborted = fake.nextAbort()
    const res = await postJson(gw, '/v1/chat/completions', streamHello)
    expect(res.status).toBe(200)
    const events = await readEvents(res)
    expect(events.length).toBeGreaterThan(1)
    expect(JSON.parse(events[0]!).choices[0].delta.content).toBe('tick 0 ')
    expect(events).not.toContain('[DONE]')
    expect((JSON.parse(events.at(-1)!) as ErrorEnvelope).error).toMatchObject(timedOut)
    // Every event but the last is a chunk: the error event is the only one.
    for (const e of events.slice(0, -1))
      expect(JSON.parse(e)).toHaveProperty('object', 'chat.completion.chunk')
    await upstreamAborted
  })
})

describe('an SSE event over 8 MiB', () => {
  it('is a 502 naming the limit, not a network error', async () => {
    const { fake, gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        startSse(res)
        await write(res, 'data: {"id":"')
        await writeForever(res, () => 'a'.repeat(256 * 1024))
      },
    })
    const upstreamAborted = fake.nextAbort()
    const res = await postJson(gw, '/v1/chat/completions', streamHello)
    expect(res.status).toBe(502)
    expect(await errorOf(res)).toMatchObject({
      type: 'upstream_error',
      code: 'upstream_error',
      message: 'upstream openai: stream event larger than 8 MiB',
    })
    await upstreamAborted
  })
})

describe('a compressed upstream answer', () => {
  it.each([
    ['gzip', gzipSync],
    ['x-gzip', gzipSync],
    ['deflate', deflateSync],
    ['br', brotliCompressSync],
  ] as const)('is decoded when its content-encoding is %s', async (encoding, compress) => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': encoding })
        res.end(compress(Buffer.from(JSON.stringify(completion('Hello, compressed')))))
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(200)
    const body = (await res.json()) as { choices: { message: { content: string } }[] }
    expect(body.choices[0]?.message.content).toBe('Hello, compressed')
  })

  it('streams a gzip-encoded SSE answer event by event', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        startSse(res, { 'content-encoding': 'gzip' })
        const gzip = createGzip()
        gzip.pipe(res)
        for (const payload of fullStream) {
          gzip.write(`data: ${payload}\n\n`)
          // Each event goes out as it is written, as a compressing proxy in front of a stream does.
          await new Promise<void>((resolve) => gzip.flush(() => resolve()))
        }
        gzip.end()
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', streamHello)
    expect(res.status).toBe(200)
    const events = await readEvents(res)
    expect(events.at(-1)).toBe('[DONE]')
    const content = events
      .slice(0, -1)
      .map(
        (e) =>
          (JSON.parse(e) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '',
      )
      .join('')
    expect(content).toBe('Hello')
  })

  it('decodes an error body too, so the provider message survives', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(400, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
        const error = { error: { message: 'temperature is out of range', type: 'invalid_request_error' } }
        res.end(gzipSync(Buffer.from(JSON.stringify(error))))
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(400)
    expect((await errorOf(res)).message).toContain('temperature is out of range')
  })

  it('answers 502 naming an encoding it does not decode', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'compress' })
        res.end('not really compressed')
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect(await errorOf(res)).toMatchObject({
      type: 'upstream_error',
      message: 'upstream openai: unsupported content-encoding compress',
    })
  })

  it('answers 502 saying a body that claims gzip is not', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
        res.end(JSON.stringify(completion('plain')))
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', hello)
    expect(res.status).toBe(502)
    expect((await errorOf(res)).message).toBe(
      'upstream openai: response body could not be decompressed (Z_DATA_ERROR)',
    )
  })
})

describe('an SSE field the spec does not know', () => {
  it('is ignored, as the spec says, instead of failing the stream', async () => {
    const { gw } = await setup({
      'POST /v1/chat/completions': async (_req, res) => {
        startSse(res)
        await write(res, 'x-proxy-note: hello\nretry: soon\n\n')
        for (const payload of fullStream) await write(res, `data: ${payload}\n\n`)
        res.end()
      },
    })
    const res = await postJson(gw, '/v1/chat/completions', streamHello)
    expect(res.status).toBe(200)
    const events = await readEvents(res)
    expect(events.at(-1)).toBe('[DONE]')
    expect(events).toHaveLength(5)
  })
})

import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { once } from 'node:events'
import type { ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { brotliCompressSync, gzipSync } from 'node:zlib'
import { Agent, Pool, type Dispatcher } from 'undici'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { GatewayError, UpstreamError } from '../../../src/errors.ts'
import { SseEventTooLargeError } from '../../../src/sse.ts'
import { createLogger } from '../../../src/logger.ts'
import { exchangeJson, openSse, type SseEvents } from '../../../src/providers/exchange.ts'
import {
  ERROR_TEXT_BYTES,
  postUpstream,
  readLimited,
  RELEASED_BODY_BYTES,
  ReleasedBody,
  upstreamBody,
} from '../../../src/providers/http.ts'
import type { UpstreamCall } from '../../../src/providers/types.ts'
import { sendJson, startFakeUpstream, type FakeHandler } from '../../support/fake-upstream.ts'

// The HTTP helpers every adapter reads upstream answers with, against a real server on 127.0.0.1.

/** A delay no other timer uses, to pick the call's total-time timer out of every setTimeout. */
const TOTAL_MS = 987_654
/**
 * First byte and idle timeouts past any test's own timeout: a connection the code under test fails to drop
 * stays open, and a test waiting for it to close fails instead of being rescued by undici's timeout.
 */
const UNDICI_TIMEOUT_MS = 600_000

function makeCall(
  options: {
    maxResponseBytes?: number
    signal?: AbortSignal
    totalMs?: number
    dispatcher?: Dispatcher
  } = {},
): UpstreamCall {
  return {
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
    upstream: {
      name: 'up',
      kind: 'openai-compat',
      baseUrl: 'http://127.0.0.1',
      headers: {},
      timeouts: {
        connectMs: 5_000,
        firstByteMs: UNDICI_TIMEOUT_MS,
        idleMs: UNDICI_TIMEOUT_MS,
        totalMs: options.totalMs ?? TOTAL_MS,
      },
      outputLimitField: 'max_tokens',
      retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
      maxResponseBytes: options.maxResponseBytes ?? 1024,
      latencyMs: 0,
    },
    upstreamModel: 'm',
    signal: options.signal ?? new AbortController().signal,
    log: createLogger('silent'),
  }
}

async function fakeAt(handler: FakeHandler): Promise<string> {
  const fake = await startFakeUpstream({ 'POST /x': handler })
  onTestFinished(() => fake.close())
  return `${fake.origin}/x`
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (err) {
    return err
  }
  throw new Error('expected a rejection')
}

afterEach(() => {
  vi.restoreAllMocks()
})

/** A fake upstream whose answer to `POST /x` is written by `write`; resolves `closed` when its response closes. */
async function answering(
  write: (res: ServerResponse) => void,
): Promise<{ url: string; closed: Promise<void> }> {
  let closed!: () => void
  const done = new Promise<void>((resolve) => (closed = resolve))
  const url = await fakeAt((_req, res) => {
    res.once('close', closed)
    write(res)
  })
  return { url, closed: done }
}

describe('exchangeJson', () => {
  it('parses a body of exactly maxResponseBytes, multi-byte characters split across chunks included', async () => {
    const json = Buffer.from('{"a":"é€"}')
    const padded = Buffer.concat([json, Buffer.from(' '.repeat(16 - json.length))])
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write(padded.subarray(0, 7))
      setTimeout(() => res.end(padded.subarray(7)), 5)
    })
    const answer = await exchangeJson(makeCall({ maxResponseBytes: 16 }), 'POST', url, {}, {})
    expect(answer).toMatchObject({ ok: true, status: 200, json: { a: 'é€' } })
  })

  it('refuses a byte more than maxResponseBytes with a 502 and drops the connection', async () => {
    // A body that never ends: only the gateway dropping the connection closes it.
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      const more = (): void => {
        if (!res.destroyed) res.write('[1,2,3,4,5,6,7,', () => setTimeout(more, 1))
      }
      more()
    })
    const err = await rejection(exchangeJson(makeCall({ maxResponseBytes: 20 }), 'POST', url, {}, {}))
    expect(err).toBeInstanceOf(UpstreamError)
    expect(err).toMatchObject({
      status: 502,
      code: 'upstream_error',
      message: 'upstream up: response larger than 20 bytes',
      provider: 'up',
    })
    await closed
  })

  it('calls a body that is not JSON a 502', async () => {
    const { url } = await answering((res) => res.end('{nope'))
    const err = await rejection(exchangeJson(makeCall(), 'POST', url, {}, {}))
    expect(err).toMatchObject({ status: 502, message: 'upstream up: response body is not valid JSON' })
  })

  it('answers an error status with its text, its headers and no JSON parse', async () => {
    const { url } = await answering((res) => {
      res.writeHead(429, { 'content-type': 'text/plain', 'retry-after': '7' })
      res.end('slow down {not json')
    })
    const answer = await exchangeJson(makeCall(), 'POST', url, {}, {})
    expect(answer).toMatchObject({ ok: false, status: 429, text: 'slow down {not json' })
    expect(answer.headers['retry-after']).toBe('7')
  })

  it('reads the first 64 KiB of an endless error answer and drops its connection', async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(500, { 'content-type': 'text/plain' })
      const more = (): void => {
        if (!res.destroyed) res.write('e'.repeat(16 * 1024), () => setTimeout(more, 1))
      }
      more()
    })
    const answer = await exchangeJson(makeCall(), 'POST', url, {}, {})
    expect(answer).toMatchObject({ ok: false, status: 500 })
    expect(answer.ok ? '' : answer.text).toBe('e'.repeat(ERROR_TEXT_BYTES))
    await closed
  })

  it('skips an informational answer and reads the one after it', async () => {
    const { url } = await answering((res) => {
      res.writeProcessing()
      sendJson(res, 200, { after: 'processing' })
    })
    let firstBytes = 0
    const call = { ...makeCall(), onFirstByte: () => void firstBytes++ }
    const answer = await exchangeJson(call, 'POST', url, {}, {})
    expect(answer).toMatchObject({ ok: true, status: 200, json: { after: 'processing' } })
    // The first byte is the real answer's.
    expect(firstBytes).toBe(1)
  })

  it('decodes gzip and brotli answers, error answers included', async () => {
    const gz = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
      res.end(gzipSync('{"coded":"gzip"}'))
    })
    expect(await exchangeJson(makeCall(), 'POST', gz.url, {}, {})).toMatchObject({ json: { coded: 'gzip' } })
    const br = await answering((res) => {
      res.writeHead(400, { 'content-type': 'application/json', 'content-encoding': 'br' })
      res.end(brotliCompressSync('{"error":"bad"}'))
    })
    expect(await exchangeJson(makeCall(), 'POST', br.url, {}, {})).toMatchObject({
      ok: false,
      status: 400,
      text: '{"error":"bad"}',
    })
  })

  it('maps an error answer whose body does not decode by its status alone', async () => {
    const { url } = await answering((res) => {
      res.writeHead(503, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
      res.end('not gzip at all')
    })
    expect(await exchangeJson(makeCall(), 'POST', url, {}, {})).toMatchObject({
      ok: false,
      status: 503,
      text: '',
    })
  })

  it('counts the decoded bytes against maxResponseBytes', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' })
      res.end(gzipSync(JSON.stringify({ a: 'x'.repeat(5_000) })))
    })
    const err = await rejection(exchangeJson(makeCall({ maxResponseBytes: 1024 }), 'POST', url, {}, {}))
    expect(err).toMatchObject({ status: 502, message: 'upstream up: response larger than 1024 bytes' })
  })

  it('calls a brotli body that does not decode a 502 naming the failure', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'br' })
      res.end('this was never compressed')
    })
    const err = await rejection(exchangeJson(makeCall(), 'POST', url, {}, {}))
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect((err as Error).message).toMatch(
      /^upstream up: response body could not be decompressed \(ERR__ERROR_/,
    )
  })

  it('refuses a 2xx answer in an encoding it does not decode, naming it', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'zstd' })
      res.end('whatever')
    })
    const err = await rejection(exchangeJson(makeCall(), 'POST', url, {}, {}))
    expect(err).toMatchObject({ status: 502, message: 'upstream up: unsupported content-encoding zstd' })
  })

  it('clears its total-time timer and its listener on the client once answered, and once failed', async () => {
    const ok = await answering((res) => sendJson(res, 200, { ok: true }))
    const failing = await fakeAt((_req, res) => void res.socket?.destroy())
    for (const [url, fails] of [
      [ok.url, false],
      [failing, true],
    ] as const) {
      const setSpy = vi.spyOn(globalThis, 'setTimeout')
      const clearSpy = vi.spyOn(globalThis, 'clearTimeout')
      const client = new AbortController()
      const removed = vi.spyOn(client.signal, 'removeEventListener')
      const call = exchangeJson(makeCall({ signal: client.signal }), 'POST', url, {}, {})
      if (fails) expect(await rejection(call)).toMatchObject({ status: 502, code: 'upstream_error' })
      else expect(await call).toMatchObject({ ok: true, json: { ok: true } })
      const i = setSpy.mock.calls.findIndex((args) => args[1] === TOTAL_MS)
      expect(clearSpy).toHaveBeenCalledWith(setSpy.mock.results[i]!.value)
      expect(removed).toHaveBeenCalledWith('abort', expect.any(Function))
      vi.restoreAllMocks()
    }
  })

  it("re-throws the client's abort unchanged, before the call and mid-body, and drops the connection", async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"partial":')
    })
    const gone = new AbortController()
    const early = new Error('client left before the call')
    gone.abort(early)
    expect(await rejection(exchangeJson(makeCall({ signal: gone.signal }), 'POST', url, {}, {}))).toBe(early)

    const client = new AbortController()
    let firstByte!: () => void
    const started = new Promise<void>((resolve) => (firstByte = resolve))
    const call = { ...makeCall({ signal: client.signal }), onFirstByte: firstByte }
    const reading = rejection(exchangeJson(call, 'POST', url, {}, {}))
    await started
    const reason = new Error('client closed the connection')
    client.abort(reason)
    const err = await reading
    expect(err).toBe(reason)
    expect(err).not.toBeInstanceOf(GatewayError)
    await closed
  })

  it('times out after totalMs while waiting for a connection, and never sends the request', async () => {
    let hanging!: () => void
    const arrived = new Promise<void>((resolve) => (hanging = resolve))
    const fake = await startFakeUpstream({
      'POST /hang': () => hanging(),
      'POST /x': (_req, res) => sendJson(res, 200, { sent: true }),
    })
    onTestFinished(() => fake.close())
    const pool = new Pool(fake.origin, { connections: 1 })
    onTestFinished(() => pool.destroy())
    // The pool's one connection holds a request that is never answered, until its client leaves.
    const client = new AbortController()
    const busy = rejection(
      exchangeJson(
        makeCall({ dispatcher: pool, signal: client.signal }),
        'POST',
        `${fake.origin}/hang`,
        {},
        {},
      ),
    )
    await arrived
    const queued = exchangeJson(
      makeCall({ dispatcher: pool, totalMs: 50 }),
      'POST',
      `${fake.origin}/x`,
      {},
      {},
    )
    expect(await rejection(queued)).toMatchObject({
      status: 504,
      code: 'upstream_timeout',
      message: 'upstream up timed out (total)',
    })
    const gone = new Error('client left')
    client.abort(gone)
    expect(await busy).toBe(gone)
    // The connection is free again: the queued request was dropped when it came to it, not sent.
    expect(
      await exchangeJson(makeCall({ dispatcher: pool }), 'POST', `${fake.origin}/x`, {}, {}),
    ).toMatchObject({
      json: { sent: true },
    })
    expect(fake.requests.map((r) => r.path)).toEqual(['/hang', '/x'])
  })

  it('sends a large body whole, with its length in bytes and not chunked', async () => {
    const recorded: { headers: Record<string, unknown>; body: unknown }[] = []
    const url = await fakeAt((req, res) => {
      recorded.push({ headers: req.headers, body: req.body })
      sendJson(res, 200, { ok: true })
    })
    const payload = { messages: [{ role: 'user', content: 'é€ prompt '.repeat(RELEASED_BODY_BYTES / 4) }] }
    expect(await exchangeJson(makeCall(), 'POST', url, { 'x-extra': '1' }, payload)).toMatchObject({
      json: { ok: true },
    })
    expect(recorded[0]!.body).toEqual(payload)
    expect(recorded[0]!.headers['content-length']).toBe(String(Buffer.byteLength(JSON.stringify(payload))))
    expect(recorded[0]!.headers['transfer-encoding']).toBeUndefined()
    expect(recorded[0]!.headers['content-type']).toBe('application/json')
    expect(recorded[0]!.headers['x-extra']).toBe('1')
  })
})

/** Every event of `events` (their data), read to the end. */
async function dataOf(events: SseEvents): Promise<string[]> {
  const out: string[] = []
  for await (const batch of events) for (const e of batch) out.push(e.data)
  return out
}

async function opened(call: UpstreamCall, url: string): Promise<SseEvents> {
  const answer = await openSse(call, 'POST', url, {}, {})
  if (!answer.ok) throw new Error(`expected a 2xx answer, got ${answer.status}`)
  return answer.events
}

const sse = (data: string): string => `data: ${data}\n\n`

describe('openSse', () => {
  it('gives the events as they come, an incomplete last one dropped, then ends', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse('a') + 'data: b')
      setTimeout(() => res.end('\n\n' + sse('c') + 'data: never finished'), 5)
    })
    expect(await dataOf(await opened(makeCall(), url))).toEqual(['a', 'b', 'c'])
  })

  it('gives the events of one read together, however many HTTP chunks carried them', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.flushHeaders()
      // Once the reader waits: 50 chunks of the chunked encoding, one event each, written at once.
      setTimeout(() => {
        for (let i = 0; i < 50; i++) res.write(sse(String(i)))
        setTimeout(() => res.end(), 20)
      }, 50)
    })
    const batches: string[][] = []
    for await (const batch of await opened(makeCall(), url)) batches.push(batch.map((e) => e.data))
    expect(batches.flat()).toEqual(Array.from({ length: 50 }, (_, i) => String(i)))
    // A batch a socket read (the first write goes alone, Node gathers the others), not one an HTTP chunk.
    expect(batches.length).toBeLessThan(10)
  })

  it('answers an error status with its text instead of events', async () => {
    const { url } = await answering((res) => {
      res.writeHead(401, { 'content-type': 'application/json' })
      res.end('{"error":{"message":"bad key"}}')
    })
    expect(await openSse(makeCall(), 'POST', url, {}, {})).toMatchObject({
      ok: false,
      status: 401,
      text: '{"error":{"message":"bad key"}}',
    })
  })

  it('decodes a gzip-encoded stream as it comes', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'content-encoding': 'gzip' })
      res.end(gzipSync(sse('x') + sse('y')))
    })
    expect(await dataOf(await opened(makeCall(), url))).toEqual(['x', 'y'])
  })

  it('does not read the upstream while a batch waits for its reader', async () => {
    // 30 MB of events, more than the sockets' buffers hold: the upstream can only finish if they are read.
    const mb = sse('e'.repeat(1000)).repeat(1000)
    let finished = false
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      let sent = 0
      const more = (): void => {
        while (sent < 30) {
          sent++
          if (!res.write(mb)) {
            res.once('drain', more)
            return
          }
        }
        res.end(() => (finished = true))
      }
      more()
    })
    // What undici hands the exchange, and how much of it had come when the exchange paused the connection.
    let delivered = 0
    let deliveredAtPause = -1
    let onPause!: () => void
    const paused = new Promise<void>((resolve) => (onPause = resolve))
    const agent = new Agent()
    onTestFinished(() => agent.destroy())
    const watched = agent.compose(
      (dispatch) => (opts, handler) =>
        dispatch(opts, {
          onRequestStart: (c, context) => handler.onRequestStart?.(c, context),
          onResponseStart: (c, status, headers, message) =>
            handler.onResponseStart?.(c, status, headers, message),
          onResponseData: (c, chunk) => {
            delivered += chunk.length
            handler.onResponseData?.(c, chunk)
            if (c.paused && deliveredAtPause < 0) {
              deliveredAtPause = delivered
              onPause()
            }
          },
          onResponseEnd: (c, trailers) => handler.onResponseEnd?.(c, trailers),
          onResponseError: (c, err) => handler.onResponseError?.(c, err),
        }),
    )
    const events = await opened(makeCall({ dispatcher: watched }), url)
    const first = await events.next()
    // Not read further by the reader: the exchange pauses once 64 KiB of events wait.
    await paused
    expect(deliveredAtPause).toBeLessThan(1024 * 1024)
    expect(finished).toBe(false)
    let count = first.done ? 0 : first.value.length
    for await (const batch of events) count += batch.length
    expect(count).toBe(30_000)
  })

  it('ends with a SseEventTooLargeError after the events before it, and drops the connection', async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse('before'))
      const huge = 'data: ' + 'x'.repeat(1024 * 1024)
      let n = 0
      const more = (): void => {
        if (!res.destroyed && n++ < 20) res.write(huge, () => setTimeout(more, 1))
      }
      more()
    })
    const events = await opened(makeCall(), url)
    const seen: string[] = []
    const err = await rejection(
      (async () => {
        for await (const batch of events) for (const e of batch) seen.push(e.data)
      })(),
    )
    expect(err).toBeInstanceOf(SseEventTooLargeError)
    expect(seen).toEqual(['before'])
    await closed
  })

  it('fails the events with a 502 when the connection breaks mid-stream, after the events before it', async () => {
    const { url } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse('a'), () => setTimeout(() => res.socket?.destroy(), 20))
    })
    const events = await opened(makeCall(), url)
    const seen: string[] = []
    const err = await rejection(
      (async () => {
        for await (const batch of events) for (const e of batch) seen.push(e.data)
      })(),
    )
    expect(seen).toEqual(['a'])
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
  })

  it('fails the events with a 504 once totalMs has passed, and drops the connection', async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(': keep-alive\n\n')
    })
    const events = await opened(makeCall({ totalMs: 80 }), url)
    expect(await rejection(dataOf(events))).toMatchObject({
      status: 504,
      code: 'upstream_timeout',
      message: 'upstream up timed out (total)',
    })
    await closed
  })

  it("re-throws the client's abort unchanged mid-stream, and drops the connection", async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse('a'))
    })
    const client = new AbortController()
    const events = await opened(makeCall({ signal: client.signal }), url)
    expect(await events.next()).toMatchObject({ done: false })
    const reading = rejection(events.next())
    const reason = new Error('client closed the connection')
    client.abort(reason)
    expect(await reading).toBe(reason)
    await closed
  })

  it('close() drops the connection and ends the events; the timer and the listener go with them', async () => {
    const { url, closed } = await answering((res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write(sse('a'))
    })
    const setSpy = vi.spyOn(globalThis, 'setTimeout')
    const clearSpy = vi.spyOn(globalThis, 'clearTimeout')
    const client = new AbortController()
    const removed = vi.spyOn(client.signal, 'removeEventListener')
    const events = await opened(makeCall({ signal: client.signal }), url)
    await events.next()
    events.close()
    expect(await events.next()).toEqual({ done: true, value: undefined })
    await closed
    const i = setSpy.mock.calls.findIndex((args) => args[1] === TOTAL_MS)
    expect(clearSpy).toHaveBeenCalledWith(setSpy.mock.results[i]!.value)
    expect(removed).toHaveBeenCalledWith('abort', expect.any(Function))
  })
})

describe('readLimited', () => {
  it('returns the first `limit` bytes of an endless body and stops reading it', async () => {
    const endless = Readable.from(
      (function* () {
        for (;;) yield Buffer.from('0123456789')
      })(),
    )
    expect(await readLimited(endless, 25)).toBe('0123456789012345678901234')
    expect(endless.destroyed).toBe(true)
  })
})

describe('postUpstream', () => {
  /** The Timeout object of the call's total-time timer. */
  function totalTimer(setSpy: { mock: { calls: unknown[][]; results: { value: unknown }[] } }): unknown {
    const i = setSpy.mock.calls.findIndex((args) => args[1] === TOTAL_MS)
    expect(i).toBeGreaterThanOrEqual(0)
    return setSpy.mock.results[i]!.value
  }

  it('clears its total-time timer once the body has been read', async () => {
    const url = await fakeAt((_req, res) => sendJson(res, 200, { ok: true }))
    const setSpy = vi.spyOn(globalThis, 'setTimeout')
    const clearSpy = vi.spyOn(globalThis, 'clearTimeout')
    const res = await postUpstream(makeCall(), url, {}, {})
    expect(JSON.parse(await readLimited(res.body))).toEqual({ ok: true })
    if (!res.body.closed) await once(res.body, 'close')
    expect(clearSpy).toHaveBeenCalledWith(totalTimer(setSpy))
  })

  it('clears its total-time timer when the body is dropped unread (a stream left early)', async () => {
    const url = await fakeAt((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.write('data: {}\n\n')
    })
    const setSpy = vi.spyOn(globalThis, 'setTimeout')
    const clearSpy = vi.spyOn(globalThis, 'clearTimeout')
    const res = await postUpstream(makeCall(), url, {}, {})
    const closed = new Promise((resolve) => res.body.once('close', resolve))
    res.body.on('error', () => {}).destroy()
    await closed
    expect(clearSpy).toHaveBeenCalledWith(totalTimer(setSpy))
  })

  it('clears its total-time timer when the request fails', async () => {
    const url = await fakeAt((_req, res) => void res.socket?.destroy())
    const setSpy = vi.spyOn(globalThis, 'setTimeout')
    const clearSpy = vi.spyOn(globalThis, 'clearTimeout')
    const err = await rejection(postUpstream(makeCall(), url, {}, {}))
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(clearSpy).toHaveBeenCalledWith(totalTimer(setSpy))
  })

  it("re-throws the client's abort unchanged when the client leaves mid-body", async () => {
    const url = await fakeAt((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.write('{"partial":')
    })
    const client = new AbortController()
    const call = makeCall({ signal: client.signal })
    const res = await postUpstream(call, url, {}, {})
    const reading = rejection(readLimited(res.body))
    const reason = new Error('client closed the connection')
    client.abort(reason)
    const err = await reading
    expect(err).toBe(reason)
    expect(err).not.toBeInstanceOf(GatewayError)
  })

  it('sends a large body whole, with its length in bytes and not chunked, and undici keeps none of it', async () => {
    const recorded: { headers: Record<string, unknown>; body: unknown }[] = []
    const url = await fakeAt((req, res) => {
      recorded.push({ headers: req.headers, body: req.body })
      sendJson(res, 200, { ok: true })
    })
    // What undici keeps of each request for as long as its answer lasts.
    const kept: { body: unknown }[] = []
    const onCreate = (message: unknown): void =>
      void kept.push((message as { request: { body: unknown } }).request)
    subscribe('undici:request:create', onCreate)
    onTestFinished(() => void unsubscribe('undici:request:create', onCreate))
    // Two-byte and three-byte characters: the length is counted in bytes.
    const payload = { messages: [{ role: 'user', content: 'é€ prompt '.repeat(RELEASED_BODY_BYTES / 4) }] }
    const call = makeCall()
    const res = await postUpstream(call, url, {}, payload)
    expect(kept).toHaveLength(1)
    // Written by the time the answer came: the body that undici still holds has nothing left in it.
    expect(kept[0]!.body).toBeInstanceOf(ReleasedBody)
    expect([...(kept[0]!.body as ReleasedBody)]).toEqual([])
    expect(JSON.parse(await readLimited(res.body))).toEqual({ ok: true })
    expect(recorded[0]!.body).toEqual(payload)
    expect(recorded[0]!.headers['content-length']).toBe(String(Buffer.byteLength(JSON.stringify(payload))))
    expect(recorded[0]!.headers['transfer-encoding']).toBeUndefined()
  })

  it('sends a small body as a Buffer, and a large one as text given once, its length in bytes', () => {
    const small = upstreamBody({ a: 'x'.repeat(100) })
    expect(Buffer.isBuffer(small)).toBe(true)
    expect(JSON.parse(small.toString())).toEqual({ a: 'x'.repeat(100) })
    const payload = { a: '€'.repeat(RELEASED_BODY_BYTES) }
    const large = upstreamBody(payload)
    expect(large).toBeInstanceOf(ReleasedBody)
    const json = JSON.stringify(payload)
    expect((large as ReleasedBody).length).toBe(Buffer.byteLength(json))
    expect([...(large as ReleasedBody)]).toEqual([json])
    expect([...(large as ReleasedBody)]).toEqual([])
  })
})

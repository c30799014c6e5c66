import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { once } from 'node:events'
import { Readable } from 'node:stream'
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest'
import { GatewayError, UpstreamError } from '../../../src/errors.ts'
import { createLogger } from '../../../src/logger.ts'
import {
  postUpstream,
  readJson,
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

function makeCall(options: { maxResponseBytes?: number; signal?: AbortSignal } = {}): UpstreamCall {
  return {
    upstream: {
      name: 'up',
      kind: 'openai-compat',
      baseUrl: 'http://127.0.0.1',
      headers: {},
      timeouts: { connectMs: 5_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: TOTAL_MS },
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

const bytes = (...parts: (string | Buffer)[]): Readable =>
  Readable.from(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : p)))

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

describe('readJson', () => {
  it('parses a body of exactly maxResponseBytes, multi-byte characters split across chunks included', async () => {
    const json = Buffer.from('{"a":"é€"}')
    const padded = Buffer.concat([json, Buffer.from(' '.repeat(16 - json.length))])
    const body = bytes(padded.subarray(0, 7), padded.subarray(7))
    expect(await readJson(makeCall({ maxResponseBytes: 16 }), body)).toEqual({ a: 'é€' })
  })

  it('refuses a byte more than maxResponseBytes with a 502 and stops reading', async () => {
    let pulled = 0
    const endless = Readable.from(
      (function* () {
        for (;;) {
          pulled++
          yield Buffer.from('[1,2,3,4,5,6,7,')
        }
      })(),
    )
    const err = await rejection(readJson(makeCall({ maxResponseBytes: 20 }), endless))
    expect(err).toBeInstanceOf(UpstreamError)
    expect(err).toMatchObject({
      status: 502,
      code: 'upstream_error',
      message: 'upstream up: response larger than 20 bytes',
      provider: 'up',
    })
    expect(endless.destroyed).toBe(true)
    expect(pulled).toBeLessThan(100)
  })

  it('calls a body that is not JSON a 502', async () => {
    const err = await rejection(readJson(makeCall(), bytes('{nope')))
    expect(err).toMatchObject({ status: 502, message: 'upstream up: response body is not valid JSON' })
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
    const call = makeCall()
    const res = await postUpstream(call, url, {}, {})
    expect(await readJson(call, res.body)).toEqual({ ok: true })
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
    const reading = rejection(readJson(call, res.body))
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
    expect(await readJson(call, res.body)).toEqual({ ok: true })
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

  it('calls a brotli body that does not decode a 502 naming the failure', async () => {
    const url = await fakeAt((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'br' })
      res.end('this was never compressed')
    })
    const call = makeCall()
    const res = await postUpstream(call, url, {}, {})
    const err = await rejection(readJson(call, res.body))
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect((err as Error).message).toMatch(
      /^upstream up: response body could not be decompressed \(ERR__ERROR_/,
    )
  })
})

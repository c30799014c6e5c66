import { connect, type Socket } from 'node:net'
import { Writable } from 'node:stream'
import { afterEach, describe, expect, it } from 'vitest'
import { createLogger } from '../../src/logger.ts'
import { startFakeUpstream } from '../support/fake-upstream.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'
import { head } from '../support/raw-http.ts'

// A streamed answer is written as fast as its client reads it, no faster: while the client does not
// read, the gateway stops reading the upstream (which then waits too), and nothing is lost when it
// reads again. A client that goes while the gateway waits for it ends the stream: its generation is
// settled as cancelled and its log line written, 499.

// In runs here the upstream stalled after about 2 000 events (8 MB held in the four sockets' buffers
// between it and the client): 32 MB leaves the buffers' growth a margin of four.
const EVENTS = 8_000
/** Each event's content: 8 000 of them are 32 MB. */
const PIECE = 'x'.repeat(4_096)
const SETTLED = { timeout: 15_000 }

let closers: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of closers.reverse()) await c()
  closers = []
})

interface Upstream {
  /** Events the fake upstream has handed to its socket. */
  written: number
  finished: boolean
}

async function setup(): Promise<{ gw: TestGateway; upstream: Upstream; lines: Record<string, unknown>[] }> {
  const upstream: Upstream = { written: 0, finished: false }
  const fake = await startFakeUpstream({
    'POST /v1/chat/completions': async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      for (let i = 0; i < EVENTS && !res.destroyed; i++) {
        const chunk = {
          id: 'chatcmpl-big',
          object: 'chat.completion.chunk',
          created: 1_700_000_000,
          model: 'm',
          choices: [{ index: 0, delta: { content: `${i}:${PIECE}` }, finish_reason: null }],
        }
        const room = res.write(`data: ${JSON.stringify(chunk)}\n\n`)
        upstream.written = i + 1
        if (!room) await new Promise((resolve) => res.once('drain', resolve).once('close', resolve))
      }
      if (res.destroyed) return
      const last = { id: 'chatcmpl-big', object: 'chat.completion.chunk', created: 1_700_000_000, model: 'm' }
      res.write(
        `data: ${JSON.stringify({ ...last, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] })}\n\n`,
      )
      const usage = { prompt_tokens: 3, completion_tokens: EVENTS, total_tokens: EVENTS + 3 }
      res.end(`data: ${JSON.stringify({ ...last, choices: [], usage })}\n\ndata: [DONE]\n\n`)
      upstream.finished = true
    },
  })
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l) as Record<string, unknown>)
      cb()
    },
  })
  const gw = await startGateway({
    listen: true,
    file: {
      providers: { up: { kind: 'openai-compat', baseUrl: `${fake.origin}/v1` } },
      models: [{ slug: 'up/m', pricing: { prompt: 1, completion: 2 } }],
    },
    overrides: { log: createLogger('info', sink) },
  })
  closers.push(
    () => fake.close(),
    () => gw.close(),
  )
  return { gw, upstream, lines }
}

/** A client on a raw socket that asks for the stream and does not read past the answer's head. */
async function pausedClient(gw: TestGateway): Promise<{ socket: Socket; head: string; received: Buffer[] }> {
  const { hostname, port } = new URL(gw.origin)
  const socket = connect({ host: hostname, port: Number(port) })
  socket.on('error', () => {})
  await new Promise<void>((resolve) => socket.once('connect', resolve))
  // An output limit the 32 MB fits in (the gateway cuts a stream past its limit), and the connection
  // closed after the answer, so that its end is the socket's.
  const body = JSON.stringify({
    model: 'up/m',
    messages: [{ role: 'user', content: 'hi' }],
    stream: true,
    max_completion_tokens: 20_000_000,
  })
  socket.write(
    head('POST /v1/chat/completions HTTP/1.1', {
      authorization: 'Bearer sk-dev',
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    }) + body,
  )
  const received: Buffer[] = []
  const headEnd = await new Promise<number>((resolve) => {
    const onData = (d: Buffer): void => {
      received.push(d)
      const at = Buffer.concat(received).indexOf('\r\n\r\n')
      if (at < 0) return
      socket.off('data', onData)
      socket.pause()
      resolve(at)
    }
    socket.on('data', onData)
  })
  return { socket, head: Buffer.concat(received).subarray(0, headEnd).toString('latin1'), received }
}

/** Resolves once `read()` has not changed for `quietMs`. */
async function settles(read: () => number, quietMs = 300): Promise<number> {
  let last = read()
  for (;;) {
    await new Promise((r) => setTimeout(r, quietMs))
    const now = read()
    if (now === last) return now
    last = now
  }
}

/** The SSE body out of a chunked HTTP/1.1 answer's bytes after its head. */
function unchunk(bytes: Buffer): string {
  let out = ''
  let at = 0
  for (;;) {
    const lineEnd = bytes.indexOf('\r\n', at)
    const size = parseInt(bytes.subarray(at, lineEnd).toString('latin1'), 16)
    if (size === 0) return out
    out += bytes.subarray(lineEnd + 2, lineEnd + 2 + size).toString('utf8')
    at = lineEnd + 2 + size + 2
  }
}

describe('a streamed answer and a slow client', () => {
  it('holds the upstream back while the client does not read, and loses nothing when it does', async () => {
    const { gw, upstream } = await setup()
    const client = await pausedClient(gw)
    expect(client.head).toMatch(/^HTTP\/1.1 200/)
    // The gateway stops reading the upstream: its writes wait, well before the end of the answer.
    const stalled = await settles(() => upstream.written)
    expect(upstream.finished).toBe(false)
    expect(stalled).toBeLessThan(EVENTS)

    const rest: Buffer[] = [...client.received]
    client.socket.on('data', (d: Buffer) => rest.push(d))
    client.socket.resume()
    await new Promise<void>((resolve) => client.socket.once('end', resolve).once('close', resolve))
    const all = Buffer.concat(rest)
    const text = unchunk(all.subarray(all.indexOf('\r\n\r\n') + 4))
    const events = text.split('\n\n').filter((e) => e.startsWith('data: '))
    expect(events.at(-1)).toBe('data: [DONE]')
    const contents = events
      .slice(0, -1)
      .map((e) => JSON.parse(e.slice('data: '.length)) as { choices: { delta: { content?: string } }[] })
      .flatMap((c) => c.choices.map((ch) => ch.delta.content).filter((x) => x !== undefined))
    expect(contents).toHaveLength(EVENTS)
    contents.forEach((c, i) => expect(c.startsWith(`${i}:`)).toBe(true))
    expect(upstream.finished).toBe(true)
    const id = /x-generation-id: (\S+)/i.exec(client.head)![1]!
    expect((await readGeneration(gw, id)).usage.completion_tokens).toBe(EVENTS)
    client.socket.destroy()
  })

  it('ends the stream of a client that goes while the gateway waits for it: settled, logged 499', async () => {
    const { gw, upstream, lines } = await setup()
    const client = await pausedClient(gw)
    await settles(() => upstream.written)
    expect(upstream.finished).toBe(false)
    client.socket.destroy()

    await expect.poll(() => lines.filter((l) => l.msg === 'request').length, SETTLED).toBe(1)
    const id = /x-generation-id: (\S+)/i.exec(client.head)![1]!
    expect(lines.find((l) => l.msg === 'request')).toMatchObject({
      status: 499,
      aborted: true,
      generationId: id,
    })
    const record = await readGeneration(gw, id)
    expect(record.cancelled).toBe(true)
    expect(upstream.finished).toBe(false)
    await expect
      .poll(async () => gw.deps.metrics.openStreams.get().then((m) => m.values[0]?.value), SETTLED)
      .toBe(0)
  })
})

import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { readFixture, readJsonFixture } from './fixtures.ts'

// A real HTTP server on 127.0.0.1 that plays an upstream provider: handlers write the provider's
// documented wire format, and every request is recorded for the test to inspect.

export interface RecordedRequest {
  method: string
  path: string
  /** The request target as received, query included. */
  url: string
  headers: IncomingMessage['headers']
  body: unknown
}

export type FakeHandler = (req: RecordedRequest, res: ServerResponse) => void | Promise<void>

export interface FakeUpstream {
  /** `http://127.0.0.1:<port>` */
  origin: string
  requests: RecordedRequest[]
  /** Responses whose connection closed before the handler finished writing (the gateway hung up). */
  abortedResponses: number
  /** Resolves when the next response is aborted by the peer. */
  nextAbort(): Promise<void>
  setHandler(route: string, handler: FakeHandler): void
  close(): Promise<void>
}

export async function startFakeUpstream(routes: Record<string, FakeHandler>): Promise<FakeUpstream> {
  const handlers = new Map(Object.entries(routes))
  const abortWaiters: (() => void)[] = []
  const fake: FakeUpstream = {
    origin: '',
    requests: [],
    abortedResponses: 0,
    nextAbort: () => new Promise<void>((resolve) => abortWaiters.push(resolve)),
    setHandler: (route, handler) => void handlers.set(route, handler),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
  const server = createServer(async (req, res) => {
    const raw: Buffer[] = []
    for await (const chunk of req) raw.push(chunk as Buffer)
    const text = Buffer.concat(raw).toString('utf8')
    let body: unknown = text
    try {
      body = text === '' ? undefined : JSON.parse(text)
    } catch {
      // Not JSON: keep the text.
    }
    const path = (req.url ?? '/').split('?')[0] ?? '/'
    const recorded: RecordedRequest = {
      method: req.method ?? 'GET',
      path,
      url: req.url ?? '/',
      headers: req.headers,
      body,
    }
    fake.requests.push(recorded)
    res.on('close', () => {
      if (!res.writableFinished) {
        fake.abortedResponses++
        abortWaiters.splice(0).forEach((w) => w())
      }
    })
    const handler = handlers.get(`${recorded.method} ${path}`)
    if (!handler) {
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: { message: `no fake route ${recorded.method} ${path}` } }))
      return
    }
    try {
      await handler(recorded, res)
    } catch (err) {
      if (!res.headersSent) res.writeHead(500)
      res.end(String(err))
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  fake.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return fake
}

/** The JSON body of the `i`th request, typed loosely: the test's assertions check its shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export const sentBody = (fake: FakeUpstream, i = 0): any => fake.requests[i]!.body

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers })
  res.end(JSON.stringify(body))
}

/** Writes an SSE response from raw event payloads (`data: <payload>\n\n` each), optionally spaced in time. */
export async function sendSse(res: ServerResponse, payloads: string[], delayMs = 0): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  for (const p of payloads) {
    if (res.destroyed) return
    res.write(`data: ${p}\n\n`)
    if (delayMs > 0) await sleep(delayMs)
  }
  res.end()
}

export interface SseReplay {
  /** Pause after each event. */
  delayMs?: number
  /** Destroy the socket after this many events: a stream the provider cuts. */
  cutAfter?: number
}

/**
 * Writes SSE text the way a provider does: one write per event, in the text's own framing (events
 * end with CRLF CRLF when the text uses it, as Gemini's do, else LF LF).
 */
export async function writeSseText(
  res: ServerResponse,
  text: string,
  options: SseReplay = {},
): Promise<void> {
  const eol = text.includes('\r\n\r\n') ? '\r\n\r\n' : '\n\n'
  const events = text.split(eol).filter((e) => e.trim() !== '')
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  res.flushHeaders()
  for (const [i, e] of events.entries()) {
    if (res.destroyed) return
    if (options.cutAfter !== undefined && i >= options.cutAfter) {
      res.socket?.destroy()
      return
    }
    await new Promise<void>((resolve) => res.write(`${e}${eol}`, () => resolve()))
    if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs))
  }
  res.end()
}

/** A handler that answers with a JSON fixture (`jsonFile('gemini/error-429.json', 429)`). */
export const jsonFile =
  (path: string, status = 200, headers: Record<string, string> = {}): FakeHandler =>
  (_req, res) =>
    sendJson(res, status, readJsonFixture(path), headers)

/** A handler that replays an SSE fixture with `writeSseText` (`sseFile('anthropic/text.sse')`). */
export const sseFile =
  (path: string, options: SseReplay = {}): FakeHandler =>
  (_req, res) =>
    writeSseText(res, readFixture(path), options)

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

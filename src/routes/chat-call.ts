import type { OutgoingHttpHeaders } from 'node:http'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Deps } from '../deps.ts'
import { startChat, type ChatInput, type ChatStart } from '../inference/chat.ts'
import type { ChatRequest } from '../providers/types.ts'
import type { AttemptRecord } from '../domain/records.ts'
import { attemptHeaders } from './admission.ts'
import { upstreamSignal } from './upstream-signal.ts'

// What every route on the chat pipeline (chat completions, Responses, Messages) hands startChat from
// its HTTP request, and what its answer carries, so that the dialects differ only in translation.

export interface RouteChat {
  /** Aborted when the client goes away: the upstream call is cut. */
  signal: AbortSignal
  /**
   * Starts the generation. The answer carries the rate-limit headers and `X-Generation-Id` once it is
   * admitted; an error answer also names the deployment tried last and the number of calls.
   */
  start(req: ChatRequest, more?: Pick<ChatInput, 'onRouted'>): Promise<ChatStart>
}

export function routeChat(deps: Deps, request: FastifyRequest, reply: FastifyReply, api: string): RouteChat {
  const signal = upstreamSignal(reply)
  let attempts: readonly AttemptRecord[] = []
  return {
    signal,
    start: (req, more) =>
      startChat(deps, {
        account: request.account,
        key: request.apiKey,
        req,
        api,
        signal,
        log: request.log,
        onAdmitted: (id, headers, tried) => {
          reply.headers(headers).header('x-generation-id', id)
          attempts = tried
        },
        requestCounted: request.junction.requestCounted,
        preAdmission: request.junction.deferredAdmission,
        onRecord: (record) => {
          request.junction.record = record
        },
        traceparent: request.junction.trace?.traceparent,
        ...more,
      }).then(
        (started) => {
          reply.headers(started.headers)
          return started
        },
        (err: unknown) => {
          // The error handler keeps these headers.
          reply.headers(attemptHeaders(attempts))
          throw err
        },
      ),
  }
}

/**
 * Sends an SSE answer: its headers, the open-streams gauge for as long as its connection lasts, and
 * `body`'s texts written to the response as they come, waiting for the socket when it is full. The
 * body is written here rather than handed to Fastify as a stream: a Node Readable over an async
 * iterator, piped to the response, cost each written batch a Readable's push, 'data' and pipe steps
 * and their promises, and every open stream about forty-five more closures (a 100-chunk streamed
 * request took 10-25 % more CPU at saturation). Fastify's lifecycle stays: the end of the answer is
 * its onResponse (the request's log line). When the client goes first, the body is returned (its
 * generation settled as cancelled) and `request.junction.eventStream` settles once it has been,
 * which is when that request is logged (app.ts). Resolves when the answer has ended either way.
 */
export async function sendEventStream(
  deps: Deps,
  request: FastifyRequest,
  reply: FastifyReply,
  body: AsyncIterable<string>,
): Promise<void> {
  const res = reply.raw
  reply
    .header('content-type', 'text/event-stream; charset=utf-8')
    .header('cache-control', 'no-cache')
    .header('x-accel-buffering', 'no')
  if (request.junction.aborted === true || res.destroyed) {
    // The client left while the answer was being started: the relay settled its generation when it
    // went (inference/chat.ts), and Fastify's send writes the request's line (app.ts's onSend, 499).
    reply.send()
    return
  }
  let gone = false
  /** Wakes a write waiting for room in the socket. */
  let wake: (() => void) | undefined
  deps.metrics.openStreams.inc()
  res.once('close', () => {
    deps.metrics.openStreams.dec()
    gone = !res.writableEnded
    wake?.()
  })
  res.writeHead(reply.statusCode, reply.getHeaders() as OutgoingHttpHeaders)
  const written = writeEvents(body, {
    write: (text) => res.write(text),
    room: () =>
      new Promise<void>((resolve) => {
        const done = (): void => {
          res.removeListener('drain', done)
          wake = undefined
          resolve()
        }
        wake = done
        res.once('drain', done)
      }),
    gone: () => gone || res.destroyed,
  })
  request.junction.eventStream = written.then(noop, noop)
  try {
    await written
  } catch (err) {
    // The body's own failures are events (writeSse and the dialects' writers): this is a bug. The
    // answer cannot be an error any more; the connection is cut so the client sees it incomplete.
    request.log.error({ err }, 'event stream failed')
    res.destroy()
    return
  }
  if (!gone && !res.destroyed) res.end()
}

const noop = (): void => {}

/**
 * Writes `body`'s texts until it ends or the client is gone (then returns it, so that its own cleanup
 * runs), waiting for room when a write says the socket is full.
 */
async function writeEvents(
  body: AsyncIterable<string>,
  out: { write: (text: string) => boolean; room: () => Promise<void>; gone: () => boolean },
): Promise<void> {
  const it = body[Symbol.asyncIterator]()
  for (;;) {
    const next = await it.next()
    if (next.done === true) return
    if (out.gone()) break
    if (!out.write(next.value)) await out.room()
    if (out.gone()) break
  }
  await it.return?.()
}

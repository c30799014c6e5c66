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

/** An SSE answer's headers, and the open-streams gauge for as long as its connection lasts. */
export function openEventStream(deps: Deps, reply: FastifyReply): void {
  reply
    .header('content-type', 'text/event-stream; charset=utf-8')
    .header('cache-control', 'no-cache')
    .header('x-accel-buffering', 'no')
  deps.metrics.openStreams.inc()
  reply.raw.once('close', () => deps.metrics.openStreams.dec())
}

import { subscribe } from 'node:diagnostics_channel'
import { ServerResponse } from 'node:http'

// Loaded into the gateway by bench/first-byte.ts (`--import`, with an IPC channel), never by the
// gateway itself: the moments of each request's way to its first byte, from Node's and undici's
// diagnostics channels and the response's first write. The requests come one after another, so
// each event belongs to the request last begun. Answers { firstByte: 'read' } with the requests'
// timelines (µs since each request's start) and forgets them.

type Mark =
  | 'handler'
  | 'upstreamCreated'
  | 'upstreamHeadersSent'
  | 'upstreamHeaders'
  | 'firstWrite'
  | 'upstreamDone'
  | 'finish'

let start = 0
let current: Partial<Record<Mark, number>> = {}
const done: Partial<Record<Mark, number>>[] = []

const mark = (m: Mark): void => {
  if (start === 0 || current[m] !== undefined) return
  current[m] = (performance.now() - start) * 1000
}

subscribe('http.server.request.start', () => {
  start = performance.now()
  current = {}
})
subscribe('tracing:fastify.request.handler:start', () => mark('handler'))
subscribe('undici:request:create', () => mark('upstreamCreated'))
subscribe('undici:client:sendHeaders', () => mark('upstreamHeadersSent'))
subscribe('undici:request:headers', () => mark('upstreamHeaders'))
subscribe('undici:request:trailers', () => mark('upstreamDone'))
subscribe('http.server.response.finish', () => {
  mark('finish')
  done.push(current)
  start = 0
})

const write = ServerResponse.prototype.write
ServerResponse.prototype.write = function (this: ServerResponse, ...args: unknown[]) {
  mark('firstWrite')
  return (write as (...a: unknown[]) => boolean).apply(this, args)
} as typeof write

process.on('message', (m: { firstByte?: string }) => {
  if (m?.firstByte !== 'read') return
  process.send?.({ firstByte: 'read', timelines: done.splice(0) })
})

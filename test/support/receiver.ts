import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

// A real HTTP server on 127.0.0.1 port 0 that records every request byte for byte (webhook
// receivers, redirect targets, slow or chatty servers for safe-fetch).

export interface ReceivedRequest {
  method: string
  url: string
  headers: IncomingHttpHeaders
  body: string
}

/** Answers one request; `index` counts from 0 over the receiver's life. */
export type ReceiverHandler = (req: ReceivedRequest, res: ServerResponse, index: number) => void

export interface Receiver {
  port: number
  /** `http://127.0.0.1:<port>` */
  origin: string
  requests: ReceivedRequest[]
  /** Resolves when the receiver has received its `n`th request (1-based) in all. */
  received(n: number): Promise<void>
  close(): Promise<void>
}

export async function startReceiver(handler: ReceiverHandler): Promise<Receiver> {
  const requests: ReceivedRequest[] = []
  const waiters: { n: number; resolve: () => void }[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      const r = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      }
      requests.push(r)
      for (const w of waiters.filter((w) => requests.length >= w.n)) w.resolve()
      handler(r, res, requests.length - 1)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    port,
    origin: `http://127.0.0.1:${port}`,
    requests,
    received: (n) =>
      requests.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve })),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

import type { AddressInfo } from 'node:net'
import { createServer as createTlsServer } from 'node:tls'
import { afterEach, describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import type { LookupAll } from '../../../src/http/address-guard.ts'
import { SafeRequestError, safeRequest, type SafeRequestOptions } from '../../../src/http/safe-fetch.ts'
import { startReceiver, type Receiver } from '../../support/receiver.ts'

const local = { allowHttp: true, allowedHosts: ['127.0.0.1'] }
const base: SafeRequestOptions = {
  method: 'GET',
  headers: {},
  timeoutMs: 5_000,
  maxBytes: 1 << 20,
  policy: local,
}

const servers: Receiver[] = []
async function serve(...args: Parameters<typeof startReceiver>): Promise<Receiver> {
  const r = await startReceiver(...args)
  servers.push(r)
  return r
}
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()))
})

async function failure(p: Promise<unknown>): Promise<unknown> {
  try {
    await p
  } catch (err) {
    return err
  }
  throw new Error('expected the request to fail')
}

describe('safeRequest', () => {
  it('sends the method, headers and body and returns the answer', async () => {
    const server = await serve((_req, res) => res.writeHead(201, { 'x-reply': 'yes' }).end('created'))
    const res = await safeRequest(new URL(`${server.origin}/in?q=1`), {
      ...base,
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-test': 'a' },
      body: '{"a":1}',
    })
    expect(res.status).toBe(201)
    expect(res.headers['x-reply']).toBe('yes')
    expect(res.body.toString()).toBe('created')
    expect(server.requests).toMatchObject([
      {
        method: 'POST',
        url: '/in?q=1',
        body: '{"a":1}',
        headers: { 'x-test': 'a', 'content-type': 'application/json' },
      },
    ])
  })

  it('returns a redirect as is and never follows it', async () => {
    const target = await serve((_req, res) => res.end('followed'))
    const redirecting = await serve((_req, res) =>
      res.writeHead(302, { location: `${target.origin}/x` }).end(),
    )
    const res = await safeRequest(new URL(`${redirecting.origin}/`), base)
    expect(res.status).toBe(302)
    expect(res.headers.location).toBe(`${target.origin}/x`)
    expect(redirecting.requests).toHaveLength(1)
    expect(target.requests).toHaveLength(0)
  })

  it('times out a server that never answers', async () => {
    const silent = await serve(() => {})
    const err = await failure(safeRequest(new URL(`${silent.origin}/`), { ...base, timeoutMs: 200 }))
    expect(err).toBeInstanceOf(SafeRequestError)
    expect(err).toMatchObject({ kind: 'timeout', message: 'timed out after 200 ms' })
  })

  it('times out a body that stops half way', async () => {
    const stalling = await serve((_req, res) => {
      res.writeHead(200, { 'content-length': '100' })
      res.write('only part')
    })
    const err = await failure(safeRequest(new URL(`${stalling.origin}/`), { ...base, timeoutMs: 200 }))
    expect(err).toMatchObject({ kind: 'timeout' })
  })

  it('refuses a body over maxBytes, declared or streamed', async () => {
    const declared = await serve((_req, res) => res.end('x'.repeat(2048)))
    const streamed = await serve((_req, res) => {
      res.writeHead(200) // chunked: no length known up front
      res.write('x'.repeat(1000))
      res.end('x'.repeat(1000))
    })
    for (const s of [declared, streamed]) {
      const err = await failure(safeRequest(new URL(`${s.origin}/`), { ...base, maxBytes: 1024 }))
      expect(err).toBeInstanceOf(SafeRequestError)
      expect(err).toMatchObject({ kind: 'too_large', message: 'response body exceeds 1024 bytes' })
    }
    const res = await safeRequest(new URL(`${declared.origin}/`), { ...base, maxBytes: 2048 })
    expect(res.body).toHaveLength(2048)
  })

  it('connects to the address it checked, once resolved, keeping the host name in Host', async () => {
    const server = await serve((req, res) => res.end(req.headers.host))
    const answers = ['127.0.0.1', '192.0.2.1']
    let calls = 0
    // The second answer would be a rebinding: it must never be asked for, let alone used.
    const lookup: LookupAll = async () => [{ address: answers[calls++] ?? '192.0.2.1', family: 4 }]
    const res = await safeRequest(new URL(`http://hooks.test:${server.port}/hook`), {
      ...base,
      policy: { allowHttp: true, allowedHosts: ['hooks.test'] },
      lookup,
    })
    expect(calls).toBe(1)
    expect(res.status).toBe(200)
    expect(server.requests).toHaveLength(1)
    expect(server.requests[0]!.headers.host).toBe(`hooks.test:${server.port}`)
  })

  it('over https, connects to the pinned address with the host name as TLS server name', async () => {
    // No certificate is needed to see the ClientHello: the server records the SNI and hangs up.
    const serverNames: string[] = []
    const tls = createTlsServer({
      SNICallback: (name, cb) => {
        serverNames.push(name)
        cb(new Error('no certificate here'), undefined)
      },
    })
    await new Promise<void>((resolve) => tls.listen(0, '127.0.0.1', resolve))
    try {
      const { port } = tls.address() as AddressInfo
      const err = await failure(
        safeRequest(new URL(`https://hooks.test:${port}/`), {
          ...base,
          policy: { allowHttp: false, allowedHosts: ['hooks.test'] },
          lookup: async () => [{ address: '127.0.0.1', family: 4 }],
        }),
      )
      expect(err).toMatchObject({ kind: 'network' })
      expect(serverNames).toEqual(['hooks.test'])
    } finally {
      await new Promise((resolve) => tls.close(resolve))
    }
  })

  it('sends nothing to a name that resolves to a forbidden address', async () => {
    const server = await serve((_req, res) => res.end())
    const lookup: LookupAll = async () => [{ address: '127.0.0.1', family: 4 }]
    const err = await failure(
      safeRequest(new URL(`http://hooks.test:${server.port}/`), {
        ...base,
        policy: { allowHttp: true, allowedHosts: [] },
        lookup,
      }),
    )
    expect(err).toBeInstanceOf(GatewayError)
    expect((err as GatewayError).message).toMatch(/not allowed/)
    expect(server.requests).toHaveLength(0)
  })

  it('reports a refused connection as a network failure', async () => {
    const server = await serve((_req, res) => res.end())
    const url = new URL(`${server.origin}/`)
    await server.close()
    servers.length = 0
    const err = await failure(safeRequest(url, base))
    expect(err).toMatchObject({ kind: 'network', message: 'connection failed (ECONNREFUSED)' })
  })

  it('stops when the caller aborts', async () => {
    const silent = await serve(() => {})
    const ac = new AbortController()
    const p = safeRequest(new URL(`${silent.origin}/`), { ...base, signal: ac.signal })
    await silent.received(1)
    ac.abort()
    await expect(p).rejects.toMatchObject({ kind: 'aborted' })
  })
})

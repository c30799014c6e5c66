import { afterEach, describe, expect, it } from 'vitest'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { head, openRaw } from '../support/raw-http.ts'

// An answer given before the request's body was read (401, 413, 402, 429) must reach a client that is
// still sending that body: the gateway half-closes and drains for a while (a lingering close, as
// nginx does) instead of closing with unread bytes, which makes the kernel reset the connection and
// throw away the answer on the client's side.

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function gateway(env: Record<string, string> = {}, file?: unknown): Promise<TestGateway> {
  const gw = await startGateway({ env, file, listen: true })
  cleanups.push(() => gw.close())
  return gw
}

/**
 * Sends the head, then `chunks` pieces of 64 KiB of body, and only then reads the answer: as a client
 * that writes the whole request before reading (most blocking HTTP clients) does. While it writes, the
 * answer waits in its socket's receive buffer, which a reset from the gateway empties.
 */
async function sendThenRead(
  gw: TestGateway,
  headers: Record<string, string | number>,
  chunks: number,
  framing: 'length' | 'chunked' = 'length',
  path = '/v1/chat/completions',
) {
  const c = await openRaw(gw.origin)
  cleanups.push(async () => void c.socket.destroy())
  c.socket.pause()
  c.socket.write(head(`POST ${path} HTTP/1.1`, headers))
  const piece = Buffer.alloc(64 * 1024, 'a')
  const framed =
    framing === 'chunked'
      ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')])
      : piece
  for (let i = 0; i < chunks && !c.socket.destroyed && c.socket.writable; i++) {
    const written = await new Promise<boolean>((resolve) => {
      c.socket.write(framed, (err) => resolve(err == null))
    })
    if (!written) break
  }
  c.socket.resume()
  return c.response().catch((err: Error) => err)
}

describe('lingering close', () => {
  // 512 pieces: 32 MiB, far more than the socket buffers of both sides hold, so the gateway answers
  // while the client still writes.
  it('a 401 answered while a large body is still being sent reaches the client', async () => {
    const gw = await gateway()
    const res = await sendThenRead(
      gw,
      { 'content-type': 'application/json', 'content-length': 64 * 1024 * 512 },
      512,
    )
    expect(res).not.toBeInstanceOf(Error)
    if (res instanceof Error) return
    expect(res.status).toBe(401)
    expect(JSON.parse(res.body).error.code).toBe('missing_api_key')
  })

  it("the same on /v1/messages, whose errors take Anthropic's shape", async () => {
    const gw = await gateway()
    const res = await sendThenRead(
      gw,
      { 'content-type': 'application/json', 'content-length': 64 * 1024 * 512 },
      512,
      'length',
      '/v1/messages',
    )
    expect(res).not.toBeInstanceOf(Error)
    if (res instanceof Error) return
    expect(res.status).toBe(401)
    expect(JSON.parse(res.body)).toMatchObject({ type: 'error', error: { type: 'authentication_error' } })
  })

  it('every chat dialect admits before the body: a broke account gets 402, not the 413 its 32 MiB body would earn', async () => {
    const gw = await gateway({}, { accounts: [{ id: 'broke', keys: ['sk-broke-0001'], credits: 0 }] })
    for (const path of ['/v1/chat/completions', '/v1/responses', '/v1/messages']) {
      const res = await sendThenRead(
        gw,
        {
          'content-type': 'application/json',
          authorization: 'Bearer sk-broke-0001',
          'content-length': 64 * 1024 * 512,
        },
        512,
        'length',
        path,
      )
      expect(res, path).not.toBeInstanceOf(Error)
      if (res instanceof Error) return
      expect(res.status, path).toBe(402)
    }
  })

  it('a 413 on the announced length reaches the client while it keeps sending', async () => {
    const gw = await gateway({ GATEWAY_BODY_LIMIT_BYTES: '1000' })
    const res = await sendThenRead(
      gw,
      {
        authorization: 'Bearer sk-dev',
        'content-type': 'application/json',
        'content-length': 64 * 1024 * 512,
      },
      512,
    )
    expect(res).not.toBeInstanceOf(Error)
    if (res instanceof Error) return
    expect(res.status).toBe(413)
    expect(JSON.parse(res.body).error.code).toBe('payload_too_large')
  })

  it('a 413 found while reading a chunked body reaches the client', async () => {
    const gw = await gateway({ GATEWAY_BODY_LIMIT_BYTES: '100000' })
    const res = await sendThenRead(
      gw,
      { authorization: 'Bearer sk-dev', 'content-type': 'application/json', 'transfer-encoding': 'chunked' },
      512,
      'chunked',
    )
    expect(res).not.toBeInstanceOf(Error)
    if (res instanceof Error) return
    expect(res.status).toBe(413)
    expect(JSON.parse(res.body).error.code).toBe('payload_too_large')
  })
})

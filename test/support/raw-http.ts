import { connect, type Socket } from 'node:net'

// HTTP/1.1 by hand over a plain TCP socket: for requests no HTTP client sends (malformed, stalled,
// half-sent) and for watching what the gateway does with the connection afterwards.

export interface RawResponse {
  status: number
  /** Lower-case names. */
  headers: Record<string, string>
  body: string
}

export interface RawConnection {
  socket: Socket
  /** Resolves when the connection has closed, whichever side closed it. */
  closed: Promise<void>
  /** Writes bytes; a write on a connection the gateway already closed is ignored. */
  send(data: string | Buffer): Promise<void>
  /** The next whole response (content-length framed, or ended by the close). */
  response(): Promise<RawResponse>
}

/** `localAddress`: the client address to connect from (another loopback address, 127.0.0.2, say). */
export async function openRaw(origin: string, localAddress?: string): Promise<RawConnection> {
  const { hostname, port } = new URL(origin)
  const socket = connect({ host: hostname, port: Number(port), ...(localAddress ? { localAddress } : {}) })
  // The gateway may close while the test still writes (that is often the point): not a failure here.
  socket.on('error', () => {})
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  let buffered = Buffer.alloc(0)
  let ended = false
  let wake: (() => void) | undefined
  socket.on('data', (d: Buffer) => {
    buffered = Buffer.concat([buffered, d])
    wake?.()
  })
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()))
  void closed.then(() => {
    ended = true
    wake?.()
  })

  const takeResponse = (): RawResponse | undefined => {
    const headEnd = buffered.indexOf('\r\n\r\n')
    if (headEnd === -1) return undefined
    const [statusLine = '', ...lines] = buffered.subarray(0, headEnd).toString('latin1').split('\r\n')
    const headers: Record<string, string> = {}
    for (const line of lines) {
      const colon = line.indexOf(':')
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
    }
    const length = headers['content-length']
    const bodyStart = headEnd + 4
    let bodyEnd: number
    if (length !== undefined) {
      bodyEnd = bodyStart + Number(length)
      if (buffered.length < bodyEnd) return undefined
    } else if (ended) {
      bodyEnd = buffered.length
    } else {
      return undefined
    }
    const body = buffered.subarray(bodyStart, bodyEnd).toString('utf8')
    buffered = buffered.subarray(bodyEnd)
    return { status: Number(statusLine.split(' ')[1]), headers, body }
  }

  return {
    socket,
    closed,
    send: (data) =>
      new Promise<void>((resolve) => {
        if (socket.destroyed || !socket.writable) return resolve()
        socket.write(data, () => resolve())
      }),
    async response() {
      for (;;) {
        const res = takeResponse()
        if (res) return res
        if (ended) throw new Error(`connection closed before a whole response: ${buffered.toString()}`)
        await new Promise<void>((resolve) => (wake = resolve))
      }
    },
  }
}

/** A request head with `Host` and the given headers, ending with the blank line. */
export function head(requestLine: string, headers: Record<string, string | number> = {}): string {
  const lines = [requestLine, 'host: 127.0.0.1']
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`)
  return `${lines.join('\r\n')}\r\n\r\n`
}

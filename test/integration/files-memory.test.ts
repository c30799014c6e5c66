import { createHash } from 'node:crypto'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { request as httpRequest, type ClientRequest } from 'node:http'
import type { Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Transform } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createLocalFileStorage } from '../../src/files/local-storage.ts'
import type { FileStorage } from '../../src/files/storage.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// A 50 MB upload is streamed to storage, never held whole. Shown without measuring the machine:
// - the client sends the first half and waits until storage has received a quarter of the file: a
//   gateway that read the whole body before storing would never get there (the test times out);
// - every time a chunk reaches storage, the bytes the gateway has read from the socket but not yet
//   stored (what it holds) stay under 1 MB: stream buffers are bounded by backpressure, a buffered
//   body would be 50 MB;
// - the bytes stored, and those downloaded again, are the bytes sent.
// The RSS figure for the same upload is in the benchmark (`npm run bench`).

const FILE_BYTES = 50 * 1024 * 1024
const CHUNK = 64 * 1024
const BOUNDARY = '----junction-streaming-test'
const MB = 1024 * 1024

/** Counts the bytes reaching storage and what the gateway holds meanwhile. */
interface Observed {
  stored: number
  maxHeld: number
  /** The gateway's side of the upload's connection. */
  socket: Socket | undefined
  /** Resolves once `bytes` have reached storage. */
  storedAtLeast(bytes: number): Promise<void>
}

function observingStorage(inner: FileStorage): { storage: FileStorage; observed: Observed } {
  const waiters: { bytes: number; resolve: () => void }[] = []
  const observed: Observed = {
    stored: 0,
    maxHeld: 0,
    socket: undefined,
    storedAtLeast: (bytes) =>
      new Promise((resolve) => {
        if (observed.stored >= bytes) resolve()
        else waiters.push({ bytes, resolve })
      }),
  }
  const storage: FileStorage = {
    ...inner,
    write(source, options) {
      const counting = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          observed.stored += chunk.length
          const read = observed.socket?.bytesRead ?? 0
          observed.maxHeld = Math.max(observed.maxHeld, read - observed.stored)
          for (const w of waiters.filter((x) => observed.stored >= x.bytes)) {
            waiters.splice(waiters.indexOf(w), 1)
            w.resolve()
          }
          callback(null, chunk)
        },
      })
      source.once('error', (err) => counting.destroy(err))
      return inner.write(source.pipe(counting), options)
    },
  }
  return { storage, observed }
}

/** Deterministic, incompressible-looking bytes, chunk by chunk into one reused buffer. */
function fileChunk(i: number, chunk: Buffer): Buffer {
  for (let j = 0; j < CHUNK; j += 4) chunk.writeUInt32LE((i * 2654435761 + j * 40503) >>> 0, j)
  return chunk
}

const write = (req: ClientRequest, data: Buffer | string): Promise<void> =>
  new Promise((resolve, reject) => req.write(data, (err) => (err ? reject(err) : resolve())))

describe('a 50 MB upload', () => {
  let dir: string
  let gw: TestGateway
  let observed: Observed

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-files-streaming-'))
    const observing = observingStorage(createLocalFileStorage(dir))
    observed = observing.observed
    gw = await startGateway({
      env: { GATEWAY_FILES_DIR: dir },
      overrides: { fileStorage: observing.storage },
      listen: true,
    })
  })

  afterAll(async () => {
    await gw?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('is streamed to storage as it arrives, holding little, and the bytes come back intact', async () => {
    gw.app.server.once('connection', (socket: Socket) => (observed.socket = socket))
    const sent = createHash('sha256')
    const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(
        `${gw.origin}/v1/files`,
        {
          method: 'POST',
          agent: false,
          headers: { ...devAuth, 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
        },
        (res) => {
          const parts: Buffer[] = []
          res.on('data', (c: Buffer) => parts.push(c))
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts).toString() }))
        },
      )
      req.on('error', reject)
      void (async () => {
        await write(req, `--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`)
        await write(
          req,
          `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n` +
            'Content-Type: application/octet-stream\r\n\r\n',
        )
        const chunk = Buffer.alloc(CHUNK)
        const chunks = FILE_BYTES / CHUNK
        for (let i = 0; i < chunks; i++) {
          // Half sent: storage must already be receiving before the rest is sent.
          if (i === chunks / 2) await observed.storedAtLeast(FILE_BYTES / 4)
          fileChunk(i, chunk)
          sent.update(chunk)
          // Each chunk is handed to the socket before the buffer is refilled.
          await write(req, chunk)
        }
        req.end(`\r\n--${BOUNDARY}--\r\n`)
      })().catch(reject)
    })

    const res = await answer
    expect(res.status).toBe(200)
    const file = JSON.parse(res.body) as { id: string; bytes: number }
    expect(file.bytes).toBe(FILE_BYTES)
    expect(observed.stored).toBe(FILE_BYTES)
    expect(observed.maxHeld).toBeGreaterThan(0)
    expect(observed.maxHeld).toBeLessThan(MB)

    // Downloaded: the same bytes.
    const received = createHash('sha256')
    let length = 0
    const download = await fetch(`${gw.origin}/v1/files/${file.id}/content`, { headers: devAuth })
    expect(download.headers.get('content-length')).toBe(String(FILE_BYTES))
    for await (const chunk of download.body!) {
      received.update(chunk)
      length += chunk.length
    }
    expect(length).toBe(FILE_BYTES)
    expect(received.digest('hex')).toBe(sent.digest('hex'))
    expect((await readdir(dir)).filter((n) => !n.startsWith('.'))).toHaveLength(1)
  }, 60_000)
})

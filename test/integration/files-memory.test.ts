import { createHash } from 'node:crypto'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// A 50 MB upload is streamed to storage: the gateway's memory grows by far less than the file.
// The gateway runs in this test's own process (its own fork), so this process's RSS is measured while
// the client produces the body chunk by chunk and the gateway writes it to disk.
//
// V8 frees spent Buffers lazily: up to 64 MB of dead external memory may pile up before it collects
// (about 65 MB of growth for this upload, and about 80 MB for a 200 MB one: bounded by the collector,
// not by the file). Each sample therefore forces collections first, so the figure is the memory the
// upload actually holds, which is what streaming is about (an upload buffered whole fails this test).
// Samples are taken every 2 MB the client sends (client and gateway share the process, so the
// gateway has handled what came before), which does not depend on the machine's speed.

const FILE_BYTES = Number(process.env.FILES_MEMORY_TEST_MB ?? 50) * 1024 * 1024
const CHUNK = 64 * 1024
const BOUNDARY = '----junction-memory-test'
const MB = 1024 * 1024

/** Deterministic, incompressible-looking bytes, produced chunk by chunk into one reused buffer. */
function* fileChunks(hash: ReturnType<typeof createHash>, sample: () => void): Generator<Buffer> {
  const chunk = Buffer.alloc(CHUNK)
  for (let i = 0; i < FILE_BYTES / CHUNK; i++) {
    // Every 2 MB sent.
    if (i % 32 === 0) sample()
    for (let j = 0; j < CHUNK; j += 4) chunk.writeUInt32LE((i * 2654435761 + j * 40503) >>> 0, j)
    hash.update(chunk)
    yield chunk
  }
}

function post(origin: string, body: Iterable<Buffer>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${origin}/v1/files`,
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
      // Each chunk is fully handed to the socket before the generator may refill its buffer.
      for (const chunk of body) await new Promise((r) => req.write(chunk, r))
      req.end()
    })()
  })
}

function* multipart(hash: ReturnType<typeof createHash>, sample: () => void): Generator<Buffer> {
  yield Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`)
  yield Buffer.from(
    `--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`,
  )
  yield* fileChunks(hash, sample)
  yield Buffer.from(`\r\n--${BOUNDARY}--\r\n`)
}

describe('a 50 MB upload', () => {
  let dir: string
  let gw: TestGateway

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-files-memory-'))
    gw = await startGateway({ env: { GATEWAY_FILES_DIR: dir }, listen: true })
  })

  afterAll(async () => {
    await gw?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('is streamed to disk: RSS grows far less than the file size, and the bytes come back intact', async () => {
    // Warm up the code paths (parser, storage, JIT) with a small upload first.
    const warm = await post(gw.origin, [
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n`),
      Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="w.bin"\r\n\r\n`),
      Buffer.alloc(CHUNK * 4),
      Buffer.from(`\r\n--${BOUNDARY}--\r\n`),
    ])
    expect(warm.status).toBe(200)

    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    gc()
    const baseline = process.memoryUsage().rss
    let peak = baseline
    let samples = 0
    const sample = (): void => {
      // Twice: buffers that die during the first collection's sweep are freed by the second.
      gc()
      gc()
      peak = Math.max(peak, process.memoryUsage().rss)
      samples++
    }
    const sent = createHash('sha256')
    const res = await post(gw.origin, multipart(sent, sample))
    sample()
    const growth = peak - baseline
    console.log(
      `${FILE_BYTES / MB} MB upload: RSS baseline ${(baseline / MB).toFixed(1)} MB, peak ${(peak / MB).toFixed(1)} MB, ` +
        `growth ${(growth / MB).toFixed(1)} MB (${samples} samples)`,
    )

    expect(res.status).toBe(200)
    const file = JSON.parse(res.body) as { id: string; bytes: number }
    expect(file.bytes).toBe(FILE_BYTES)
    expect(samples).toBeGreaterThan(FILE_BYTES / (2 * MB))
    // The whole file held in memory once would be 50 MB; measured growth is a few MB.
    expect(growth).toBeLessThan(FILE_BYTES / 5)

    // Streamed back: same bytes.
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
    expect((await readdir(dir)).filter((n) => !n.startsWith('.'))).toHaveLength(2)
  }, 60_000)
})

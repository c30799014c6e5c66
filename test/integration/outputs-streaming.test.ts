import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { get, request, type ServerResponse } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { createLocalFileStorage } from '../../src/files/local-storage.ts'
import type { FileStorage } from '../../src/files/storage.ts'
import { readFixture } from '../support/fixtures.ts'
import { sendJson, startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// Prediction outputs go from the upstream's download to the output storage as they come (issue 24,
// point 5): a large output generated on the fly by a fake Replicate upstream on 127.0.0.1 is kept
// intact, storage sees it in many small chunks while the upstream is still sending (the upstream
// waits for storage's first chunk before sending the rest: a gateway that read the whole download
// first would never get past that pause), and a download that fails leaves no file behind.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const MiB = 1024 * 1024
const BLOCK = 64 * 1024
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies
type Json = Record<string, any>
const OUTPUT_PATH = '/xezq/def/output.mp4'

/** Writes `bytes` of deterministic, non-repeating data (each block numbered), hashing as it goes. */
async function writeBlocks(
  res: ServerResponse,
  bytes: number,
  state: { sent: number; hash: ReturnType<typeof createHash> },
  base: Buffer,
): Promise<void> {
  const end = state.sent + bytes
  while (state.sent < end) {
    const block = Buffer.from(base.subarray(0, Math.min(BLOCK, end - state.sent)))
    if (block.length >= 4) block.writeUInt32LE(state.sent / BLOCK, 0)
    state.hash.update(block)
    state.sent += block.length
    if (!res.write(block)) {
      await new Promise<void>((resolve) => {
        const done = (): void => {
          res.off('drain', done)
          res.off('close', done)
          resolve()
        }
        res.on('drain', done)
        res.on('close', done)
      })
      if (res.destroyed) return
    }
  }
}

/** A storage that records the size of every chunk it is given, before the real one writes it. */
function tapped(inner: FileStorage, onChunk: (bytes: number) => void): FileStorage {
  async function* tap(source: Readable): AsyncGenerator<Buffer> {
    for await (const chunk of source as AsyncIterable<Buffer>) {
      onChunk(chunk.length)
      yield chunk
    }
  }
  return {
    ...inner,
    write: (source, options) => inner.write(Readable.from(tap(source), { objectMode: false }), options),
  }
}

interface Setup {
  up: FakeUpstream
  gw: TestGateway
  dir: string
  chunks: number[]
  /** Resolves at storage's first chunk. */
  firstChunk: Promise<void>
  /** Creates a prediction (a Replicate video unless `body` says otherwise); its id. */
  create(body?: unknown): Promise<string>
  step(ms?: number): Promise<void>
  lookup(id: string): Promise<Json>
}

async function setup(file: unknown = {}): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), 'junction-outputs-'))
  dirs.push(dir)
  const up = await startFakeUpstream({})
  up.setHandler('POST /v1/models/bytedance/seedance-1-lite/predictions', (_req, res) =>
    sendJson(
      res,
      201,
      JSON.parse(
        readFixture('replicate/seedance-succeeded.json')
          .replaceAll('https://api.replicate.com', up.origin)
          .replaceAll('https://replicate.delivery', up.origin),
      ),
    ),
  )
  const chunks: number[] = []
  let sawChunk!: () => void
  const firstChunk = new Promise<void>((resolve) => (sawChunk = resolve))
  const clock = { t: 1_800_000_000_000 }
  const gw = await startGateway({
    env: { GATEWAY_OUTPUTS_DIR: dir, REPLICATE_API_TOKEN: 'r8-test', REPLICATE_BASE_URL: up.origin },
    file,
    listen: true,
    overrides: {
      now: () => clock.t,
      background: false,
      outputStorage: tapped(createLocalFileStorage(dir), (n) => {
        chunks.push(n)
        sawChunk()
      }),
    },
  })
  onTestFinished(async () => {
    await up.close()
    await gw.close()
  })
  return {
    up,
    gw,
    dir,
    chunks,
    firstChunk,
    async create(
      body = { model: 'replicate/bytedance/seedance-1-lite', input: { prompt: 'waves at dusk' } },
    ) {
      const res = await send(gw, 'POST', '/v1/predictions', body)
      expect(res.status, JSON.stringify(res.body)).toBe(200)
      return res.body.data.task_id as string
    },
    async step(ms = 120_000) {
      clock.t += ms
      await gw.deps.runner.runOnce()
    },
    async lookup(id) {
      return (await send(gw, 'GET', `/v1/predictions/${id}`)).body
    },
  }
}

/**
 * One request over a real connection, closed after it (these tests run for seconds: no keep-alive
 * connection or injected request is left for the gateway's close and timers to wait on).
 */
function send(
  gw: TestGateway,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Json }> {
  return new Promise((resolve, reject) => {
    const req = request(`${gw.origin}${path}`, {
      method,
      agent: false,
      headers: { ...devAuth, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    })
    req.on('error', reject)
    req.on('response', (res) => {
      const parts: Buffer[] = []
      res.on('data', (b: Buffer) => parts.push(b))
      res.on('error', reject)
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(parts).toString('utf8')) }),
      )
    })
    req.end(body === undefined ? undefined : JSON.stringify(body))
  })
}

/** SHA-256 and size of what the gateway serves at `url` (its signed output URL), read as a stream. */
function fetchDigest(gw: TestGateway, url: string): Promise<{ sha256: string; bytes: number }> {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = get(`${gw.origin}${u.pathname}${u.search}`, { agent: false }, (res) => {
      expect(res.statusCode).toBe(200)
      const hash = createHash('sha256')
      let bytes = 0
      res.on('data', (b: Buffer) => {
        hash.update(b)
        bytes += b.length
      })
      res.on('error', reject)
      res.on('end', () => resolve({ sha256: hash.digest('hex'), bytes }))
    })
    req.on('error', reject)
  })
}

/** Objects and temporary files in the output directory. */
const filesIn = (dir: string): string[] => readdirSync(dir).filter((n) => !n.startsWith('junction.db'))

describe('prediction outputs stream to storage', () => {
  it('a 256 MiB output reaches storage in small chunks while the upstream still sends, and is kept intact', async () => {
    const s = await setup()
    const SIZE = 256 * MiB
    const HEAD = 8 * MiB
    const base = randomBytes(BLOCK)
    const sent = { sent: 0, hash: createHash('sha256') }
    let chunksWhenResumed = -1
    s.up.setHandler(`GET ${OUTPUT_PATH}`, async (_req, res) => {
      // Chunked (no Content-Length), as a generated file would come.
      res.writeHead(200, { 'content-type': 'video/mp4' })
      await writeBlocks(res, HEAD, sent, base)
      // The rest only once storage has had bytes: a gateway that reads the whole download before
      // writing never gets here (the step, and this test, would stall).
      await s.firstChunk
      chunksWhenResumed = s.chunks.length
      await writeBlocks(res, SIZE - HEAD, sent, base)
      res.end()
    })
    const id = await s.create()
    await s.step()
    const done = await s.lookup(id)
    expect(done.data.task_status).toBe('success')
    expect(chunksWhenResumed).toBeGreaterThan(0)
    // Bounded chunks, so many of them; their sum is the whole output.
    expect(Math.max(...s.chunks)).toBeLessThanOrEqual(MiB)
    expect(s.chunks.length).toBeGreaterThanOrEqual(SIZE / MiB)
    expect(s.chunks.reduce((a, b) => a + b, 0)).toBe(SIZE)
    const served = await fetchDigest(s.gw, done.data.output[0].video)
    expect(served).toEqual({ sha256: sent.hash.digest('hex'), bytes: SIZE })
    // One object, no temporary file left.
    expect(filesIn(s.dir)).toHaveLength(1)
  }, 180_000)

  it('a download cut mid-body leaves no file behind, and the task succeeds when the step is repeated', async () => {
    const s = await setup()
    const base = randomBytes(BLOCK)
    let cut = true
    const full = { sent: 0, hash: createHash('sha256') }
    s.up.setHandler(`GET ${OUTPUT_PATH}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(8 * MiB) })
      if (cut) {
        await writeBlocks(res, 2 * MiB, { sent: 0, hash: createHash('sha256') }, base)
        await s.firstChunk
        res.destroy()
        return
      }
      await writeBlocks(res, 8 * MiB, full, base)
      res.end()
    })
    // The job is still running when it is created, and done at the first poll: a failed download is
    // a failed poll, which the next one repeats.
    const succeeded = JSON.parse(
      readFixture('replicate/seedance-succeeded.json')
        .replaceAll('https://api.replicate.com', s.up.origin)
        .replaceAll('https://replicate.delivery', s.up.origin),
    ) as Json
    let creates = 0
    s.up.setHandler('POST /v1/models/bytedance/seedance-1-lite/predictions', (_req, res) => {
      creates++
      sendJson(res, 201, { ...succeeded, status: 'processing', output: null, completed_at: null })
    })
    s.up.setHandler(`GET /v1/predictions/${succeeded.id}`, (_req, res) => sendJson(res, 200, succeeded))
    const id = await s.create()
    await s.step() // submit: processing
    await s.step() // poll: done, the download is cut
    expect(s.chunks.length).toBeGreaterThan(0)
    expect((await s.lookup(id)).data.task_status).toBe('processing')
    expect(filesIn(s.dir)).toEqual([])

    cut = false
    // Retried with the poll's backoff (seconds), not when the step's 60 s lease runs out.
    await s.step(30_000)
    const done = await s.lookup(id)
    expect(done.data.task_status).toBe('success')
    expect(await fetchDigest(s.gw, done.data.output[0].video)).toEqual({
      sha256: full.hash.digest('hex'),
      bytes: 8 * MiB,
    })
    expect(filesIn(s.dir)).toHaveLength(1)
    expect(creates).toBe(1)
  })

  it('a job done at submit whose download is cut fails, and is not submitted again', async () => {
    const s = await setup()
    s.up.setHandler(`GET ${OUTPUT_PATH}`, (_req, res) => {
      res.writeHead(200, { 'content-type': 'video/mp4', 'content-length': String(8 * MiB) })
      res.write(Buffer.alloc(MiB))
      setTimeout(() => res.destroy(), 20)
    })
    const id = await s.create()
    await s.step()
    expect((await s.lookup(id)).data).toMatchObject({
      task_status: 'failed',
      error: { message: expect.stringContaining('it is not submitted again') },
    })
    await s.step(30_000)
    expect(filesIn(s.dir)).toEqual([])
    const creates = s.up.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/predictions'))
    expect(creates).toHaveLength(1)
  })

  it('an output that passes maxOutputBytes while streaming (no Content-Length) is cut and leaves no file', async () => {
    const s = await setup({ predictions: { maxOutputBytes: 4 * MiB } })
    const base = randomBytes(BLOCK)
    let written = 0
    s.up.setHandler(`GET ${OUTPUT_PATH}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'video/mp4' })
      const state = { sent: 0, hash: createHash('sha256') }
      // Far more than the limit: the gateway stops reading, so this never completes.
      await writeBlocks(res, 64 * MiB, state, base)
      written = state.sent
      res.end()
    })
    const id = await s.create()
    await s.step()
    // Done at submit: a job that cannot be polled again fails rather than being submitted twice.
    expect((await s.lookup(id)).data).toMatchObject({
      task_status: 'failed',
      error: { message: expect.stringContaining('larger than') },
    })
    expect(filesIn(s.dir)).toEqual([])
    expect(s.chunks.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(4 * MiB)
    await s.up.close()
    expect(written).toBeLessThan(64 * MiB)
  })
})

describe('encoded outputs stream from ffmpeg', () => {
  /** A stand-in for ffmpeg: a script that prints `out` then exits with `code`. */
  function fakeFfmpeg(out: string, code: number): string {
    const dir = mkdtempSync(join(tmpdir(), 'junction-ffmpeg-'))
    dirs.push(dir)
    const path = join(dir, 'ffmpeg')
    writeFileSync(path, `#!/bin/sh\nprintf '${out}'\necho 'boom' >&2\nexit ${code}\n`, { mode: 0o755 })
    return path
  }
  const speech = { model: 'mock/speech', input: { prompt: 'hello [mock:delay=0]', output_format: 'mp3' } }

  it('an ffmpeg that cannot encode fails the task at once, with nothing stored', async () => {
    const s = await setup({ predictions: { ffmpegPath: fakeFfmpeg('', 1) } })
    const id = await s.create(speech)
    await s.step() // submit
    await s.step() // ready: encoding fails before its first byte
    expect((await s.lookup(id)).data).toMatchObject({
      task_status: 'failed',
      error: { code: 'internal_error', message: 'the task failed inside the gateway' },
    })
    expect(filesIn(s.dir)).toEqual([])
  })

  it('an ffmpeg that fails after its first bytes keeps no truncated file; the task is not a success', async () => {
    const s = await setup({ predictions: { ffmpegPath: fakeFfmpeg('ID3partial', 3) } })
    const id = await s.create(speech)
    await s.step()
    await s.step()
    // A gateway fault, like the early failure: failed at once, not retried until the task's deadline.
    expect((await s.lookup(id)).data).toMatchObject({
      task_status: 'failed',
      error: { code: 'internal_error' },
    })
    expect(filesIn(s.dir)).toEqual([])
  })
})

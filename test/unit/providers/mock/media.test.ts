import { execFileSync } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { crc32, inflateSync } from 'node:zlib'
import { afterAll, describe, expect, it } from 'vitest'
import type { MediaCall, MediaJob } from '../../../../src/providers/async-media/types.ts'
import { createMockMediaAdapter, frameSize, mockImage } from '../../../../src/providers/mock/media.ts'
import { parseMediaInput } from '../../../../src/schemas/predictions.ts'
import { reading, type ReadStep } from '../../../support/media-call.ts'
import { createLogger } from '../../../../src/logger.ts'

// The mock's media models make real files: checked here by their headers, with the chunks' CRCs
// recomputed, and by ffprobe (Debian's ffmpeg) for durations and sizes.

const dir = mkdtempSync(join(tmpdir(), 'junction-mock-media-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function probe(data: Buffer, name: string): { duration: number; width?: number; height?: number } {
  const file = join(dir, name)
  writeFileSync(file, data)
  const out = execFileSync('ffprobe', [
    ...['-v', 'error', '-show_entries', 'format=duration:stream=width,height', '-of', 'json', file],
  ]).toString()
  const j = JSON.parse(out) as {
    format: { duration: string }
    streams: { width?: number; height?: number }[]
  }
  const video = j.streams.find((s) => s.width !== undefined)
  return { duration: Number(j.format.duration), width: video?.width, height: video?.height }
}

/** Splits a PNG into its chunks, checking each CRC independently. */
function pngChunks(png: Buffer): { type: string; data: Buffer }[] {
  expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))
  const chunks = []
  let o = 8
  while (o < png.length) {
    const length = png.readUInt32BE(o)
    const type = png.subarray(o + 4, o + 8).toString('ascii')
    const data = png.subarray(o + 8, o + 8 + length)
    expect(png.readUInt32BE(o + 8 + length), `CRC of ${type}`).toBe(
      crc32(png.subarray(o + 4, o + 8 + length)) >>> 0,
    )
    chunks.push({ type, data })
    o += 12 + length
  }
  return chunks
}

const call: MediaCall = {
  upstream: {} as MediaCall['upstream'],
  upstreamModel: 'x',
  signal: new AbortController().signal,
  log: createLogger('silent') as unknown as MediaCall['log'],
  media: {
    ffmpegPath: 'ffmpeg',
    maxOutputBytes: 10 * 1024 * 1024,
    fetchUserMedia: () => Promise.reject(new Error('the mock fetches nothing')),
  },
}

function job(family: MediaJob['family'], input: unknown): MediaJob {
  return { ...parseMediaInput(family, input), taskId: 'a'.repeat(32), upstreamModel: family } as MediaJob
}

async function runToEnd(j: MediaJob, clock: { t: number }, delayMs = 1000): Promise<ReadStep> {
  const adapter = reading(createMockMediaAdapter({ now: () => clock.t, delayMs }))
  const submitted = await adapter.submit(j, call)
  if (submitted.state !== 'pending') return submitted
  clock.t += 1_000_000
  return adapter.poll(j, submitted.job, call)
}

describe('mock images', () => {
  it('are PNGs: valid chunks, the size of the aspect ratio, pixels that inflate to the right length', () => {
    const png = mockImage('a red fox', 0, '16:9')
    const chunks = pngChunks(png)
    expect(chunks.map((c) => c.type)).toEqual(['IHDR', 'IDAT', 'IEND'])
    const ihdr = chunks[0]!.data
    expect([ihdr.readUInt32BE(0), ihdr.readUInt32BE(4), ihdr[8], ihdr[9]]).toEqual([256, 144, 8, 2])
    expect(inflateSync(chunks[1]!.data).length).toBe(144 * (1 + 256 * 3))
  })

  it('differ with the prompt and the index', () => {
    expect(mockImage('a', 0, '1:1').equals(mockImage('a', 0, '1:1'))).toBe(true)
    expect(mockImage('a', 0, '1:1').equals(mockImage('b', 0, '1:1'))).toBe(false)
    expect(mockImage('a', 0, '1:1').equals(mockImage('a', 1, '1:1'))).toBe(false)
  })

  it('frame sizes follow the ratio with the long side fixed and even sides', () => {
    expect(frameSize('16:9', 160)).toEqual({ width: 160, height: 90 })
    expect(frameSize('9:16', 160)).toEqual({ width: 90, height: 160 })
    expect(frameSize('4:3', 160)).toEqual({ width: 160, height: 120 })
    expect(frameSize(undefined, 256)).toEqual({ width: 256, height: 256 })
  })
})

describe('the mock media adapter', () => {
  it('is pending until its delay has passed, keeping its state, then done with num_images PNGs', async () => {
    const clock = { t: 1000 }
    const adapter = reading(createMockMediaAdapter({ now: () => clock.t, delayMs: 500 }))
    const j = job('image', { prompt: 'cat', num_images: 3, resolution: '2K' })
    const submitted = await adapter.submit(j, call)
    expect(submitted).toEqual({ state: 'pending', job: { readyAt: 1500 } })
    clock.t = 1499
    expect(await adapter.poll(j, { readyAt: 1500 }, call)).toEqual({
      state: 'pending',
      job: { readyAt: 1500 },
    })
    clock.t = 1500
    const done = await adapter.poll(j, { readyAt: 1500 }, call)
    if (done.state !== 'done') throw new Error(`not done: ${JSON.stringify(done)}`)
    expect(done.result.usage).toEqual({ kind: 'images', count: 3, tier: '2K' })
    expect(done.result.outputs.map((o) => [o.type, o.contentType])).toEqual([
      ['image', 'image/png'],
      ['image', 'image/png'],
      ['image', 'image/png'],
    ])
    for (const o of done.result.outputs) pngChunks(o.data)
  })

  it('takes [mock:delay=<ms>] from the prompt', async () => {
    const adapter = reading(createMockMediaAdapter({ now: () => 0, delayMs: 3000 }))
    expect(await adapter.submit(job('image', { prompt: 'x [mock:delay=25]' }), call)).toEqual({
      state: 'pending',
      job: { readyAt: 25 },
    })
  })

  it('[mock:fail] fails unbilled, [mock:fail=billed] fails billed, [mock:reject] is refused at submission', async () => {
    const failed = await runToEnd(job('image', { prompt: '[mock:fail] x', num_images: 2 }), { t: 0 })
    expect(failed).toMatchObject({ state: 'failed', code: 'mock_failure' })
    expect((failed as { billed?: unknown }).billed).toBeUndefined()
    const billed = await runToEnd(job('video-a', { prompt: '[mock:fail=billed] x', duration: 6 }), { t: 0 })
    expect(billed).toMatchObject({
      state: 'failed',
      code: 'mock_failure',
      billed: { kind: 'video', seconds: 6, resolution: '720P' },
    })
    const rejected = await reading(createMockMediaAdapter({ now: () => 0, delayMs: 0 })).submit(
      job('speech', { prompt: '[mock:reject] hi' }),
      call,
    )
    expect(rejected).toMatchObject({ state: 'failed', code: 'upstream_invalid_request' })
  })

  it('speech: WAV whose length follows the text, billed per character', async () => {
    const short = await runToEnd(job('speech', { prompt: 'Hello there friend.', output_format: 'wav' }), {
      t: 0,
    })
    const long = await runToEnd(
      job('speech', { prompt: 'Hello there friend. '.repeat(5).trim(), output_format: 'wav' }),
      { t: 0 },
    )
    if (short.state !== 'done' || long.state !== 'done') throw new Error('not done')
    const wav = short.result.outputs[0]!.data
    expect(short.result.outputs[0]!.contentType).toBe('audio/wav')
    expect(wav.subarray(0, 4).toString('latin1')).toBe('RIFF')
    expect(wav.subarray(8, 16).toString('latin1')).toBe('WAVEfmt ')
    expect(wav.readUInt32LE(24)).toBe(24_000)
    expect(wav.subarray(36, 40).toString('latin1')).toBe('data')
    // 19 characters at 60 ms: 1.14 s of 16-bit mono at 24 kHz.
    expect(wav.readUInt32LE(40)).toBe(Math.round(1.14 * 24_000) * 2)
    expect(probe(wav, 'short.wav').duration).toBeCloseTo(1.14, 2)
    expect(long.result.outputs[0]!.data.readUInt32LE(40)).toBeGreaterThan(4 * wav.readUInt32LE(40))
    // Both speech units: 19 + 18 characters (prompt and default style instructions) and 1.14 s of
    // audio at 25 tokens a second.
    expect(short.result.usage).toEqual({ kind: 'speech', characters: 37, audioTokens: 29 })
  })

  it('speech: MP3 and Ogg Opus, with the same duration', async () => {
    const text = 'A short sentence to say.'
    const mp3 = await runToEnd(job('speech', { prompt: text }), { t: 0 })
    const ogg = await runToEnd(job('speech', { prompt: text, output_format: 'ogg_opus' }), { t: 0 })
    if (mp3.state !== 'done' || ogg.state !== 'done') throw new Error('not done')
    const m = mp3.result.outputs[0]!
    expect(m.contentType).toBe('audio/mpeg')
    const syncOrId3 =
      m.data.subarray(0, 3).toString('latin1') === 'ID3' || (m.data.readUInt16BE(0) & 0xffe0) === 0xffe0
    expect(syncOrId3).toBe(true)
    const o = ogg.result.outputs[0]!
    expect(o.contentType).toBe('audio/ogg')
    expect(o.data.subarray(0, 4).toString('latin1')).toBe('OggS')
    expect(o.data.includes(Buffer.from('OpusHead'))).toBe(true)
    const seconds = (text.length * 60) / 1000
    expect(probe(m.data, 'a.mp3').duration).toBeGreaterThan(seconds - 0.1)
    expect(probe(m.data, 'a.mp3').duration).toBeLessThan(seconds + 0.2)
    expect(probe(o.data, 'a.ogg').duration).toBeCloseTo(seconds, 1)
  })

  it('video: an MP4 of the asked duration and aspect ratio, billed by seconds and resolution', async () => {
    const done = await runToEnd(
      job('video-c', { prompt: 'sea', aspect_ratio: '9:16', duration: 4, resolution: '1080P' }),
      {
        t: 0,
      },
    )
    if (done.state !== 'done') throw new Error('not done')
    const mp4 = done.result.outputs[0]!
    expect(mp4).toMatchObject({ type: 'video', contentType: 'video/mp4' })
    expect(mp4.data.subarray(4, 8).toString('latin1')).toBe('ftyp')
    expect(mp4.data.includes(Buffer.from('moov'))).toBe(true)
    const p = probe(mp4.data, 'v.mp4')
    expect(p).toMatchObject({ width: 90, height: 160 })
    expect(p.duration).toBeCloseTo(4, 0)
    expect(done.result.usage).toEqual({ kind: 'video', seconds: 4, resolution: '1080P' })
  })
})

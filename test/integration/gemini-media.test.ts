import { afterEach, describe, expect, it } from 'vitest'
import { GatewayError } from '../../src/errors.ts'
import type { MediaCall, MediaJob } from '../../src/providers/async-media/types.ts'
import { createGeminiMediaAdapter } from '../../src/providers/gemini/media.ts'
import {
  fromGeminiSpeechResponse,
  geminiSpeechResponseSchema,
  readVeoOperation,
  veoOperationSchema,
} from '../../src/providers/gemini/media-wire.ts'
import { parseMediaInput } from '../../src/schemas/predictions.ts'
import { readFixture, readJsonFixture } from '../support/fixtures.ts'
import { makeMediaCall, reading, type ReadStep } from '../support/media-call.ts'
import { sendJson, startFakeUpstream, type FakeHandler, type FakeUpstream } from '../support/fake-upstream.ts'

// Gemini speech generation and Veo video as predictions: the adapter's real HTTP code against a fake
// Gemini API on 127.0.0.1 answering with recorded bodies (speech-pcm.json, veo-operation-*.json).

const KEY = 'test-key'
const MP4 = Buffer.concat([Buffer.from('\x00\x00\x00\x18ftypisom', 'latin1'), Buffer.alloc(4096, 9)])
const OPERATION = 'models/veo-3.1-generate-preview/operations/3sq1ywuzq2kx'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function fake(routes: Record<string, FakeHandler>): Promise<FakeUpstream> {
  const f = await startFakeUpstream(routes)
  cleanups.push(() => f.close())
  return f
}

/** A recorded body with Google's API origin moved to the fake's. */
const recorded =
  (name: string, origin: () => string, status = 200): FakeHandler =>
  (_req, res) =>
    sendJson(
      res,
      status,
      JSON.parse(
        readFixture(`gemini/${name}`).replaceAll('https://generativelanguage.googleapis.com', origin()),
      ),
    )

function call(
  up: FakeUpstream,
  over: Partial<MediaCall['media']> = {},
  maxOutputBytes = 1024 * 1024,
): MediaCall {
  const c = makeMediaCall({ kind: 'gemini', baseUrl: up.origin, apiKey: KEY, maxOutputBytes })
  return { ...c, media: { ...c.media, ...over } }
}

const job = (family: MediaJob['family'], input: unknown, upstreamModel: string): MediaJob =>
  ({ ...parseMediaInput(family, input), taskId: 'f'.repeat(32), upstreamModel }) as MediaJob

const TTS = 'gemini-2.5-flash-preview-tts'
const VEO = 'veo-3.1-generate-preview'

describe('Gemini speech generation', () => {
  it('sends the documented request and answers WAV holding exactly the PCM, billed by audio tokens', async () => {
    const up = await fake({
      [`POST /v1beta/models/${TTS}:generateContent`]: recorded('speech-pcm.json', () => up.origin),
    })
    const step = await reading(createGeminiMediaAdapter()).submit(
      job(
        'speech',
        { prompt: 'Hello [sigh] world', voice: 'Puck', language: 'de-DE', output_format: 'wav' },
        TTS,
      ),
      call(up),
    )
    expect(up.requests).toHaveLength(1)
    const sent = up.requests[0]!
    expect(sent.headers['x-goog-api-key']).toBe(KEY)
    expect(sent.url).not.toContain(KEY)
    expect(sent.body).toEqual({
      contents: [{ role: 'user', parts: [{ text: 'Say the following.\n\nHello [sigh] world' }] }],
      generationConfig: {
        responseModalities: ['AUDIO'],
        speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: 'Puck' } }, languageCode: 'de-DE' },
      },
    })
    if (step.state !== 'done') throw new Error(JSON.stringify(step))
    const fixture = readJsonFixture('gemini/speech-pcm.json') as {
      candidates: { content: { parts: { inlineData: { data: string } }[] } }[]
    }
    const pcm = Buffer.from(fixture.candidates[0]!.content.parts[0]!.inlineData.data, 'base64')
    const wav = step.result.outputs[0]!
    expect(wav.contentType).toBe('audio/wav')
    expect(wav.data.subarray(0, 4).toString('latin1')).toBe('RIFF')
    expect(wav.data.readUInt32LE(24)).toBe(24_000)
    expect(wav.data.subarray(44).equals(pcm)).toBe(true)
    // Billed in both speech units: the characters sent (the default style instructions, 18, and the
    // prompt, 18) and the audio tokens Gemini reported.
    expect(step.result.usage).toEqual({ kind: 'speech', characters: 36, audioTokens: 3 })
  })

  it('encodes MP3 and Ogg Opus with ffmpeg', async () => {
    const up = await fake({
      [`POST /v1beta/models/${TTS}:generateContent`]: recorded('speech-pcm.json', () => up.origin),
    })
    const adapter = reading(createGeminiMediaAdapter())
    const mp3 = await adapter.submit(job('speech', { prompt: 'hi' }, TTS), call(up))
    const ogg = await adapter.submit(
      job('speech', { prompt: 'hi', output_format: 'ogg_opus' }, TTS),
      call(up),
    )
    if (mp3.state !== 'done' || ogg.state !== 'done') throw new Error('not done')
    const m = mp3.result.outputs[0]!.data
    expect(mp3.result.outputs[0]!.contentType).toBe('audio/mpeg')
    expect(m.subarray(0, 3).toString('latin1') === 'ID3' || (m.readUInt16BE(0) & 0xffe0) === 0xffe0).toBe(
      true,
    )
    expect(ogg.result.outputs[0]!.contentType).toBe('audio/ogg')
    expect(ogg.result.outputs[0]!.data.subarray(0, 4).toString('latin1')).toBe('OggS')
  })

  it('an answer without audio fails the task; a blocked prompt is content_filter', () => {
    const other = fromGeminiSpeechResponse(
      geminiSpeechResponseSchema.parse(readJsonFixture('gemini/speech-blocked.json')),
      10,
    )
    expect(other).toEqual({
      ok: false,
      code: 'upstream_failed',
      message: 'the upstream returned no audio (OTHER)',
    })
    const blocked = fromGeminiSpeechResponse({ promptFeedback: { blockReason: 'SAFETY' } }, 10)
    expect(blocked).toMatchObject({ ok: false, code: 'content_filter' })
  })

  it('without a reported count, audio tokens follow the audio length (25 a second)', () => {
    const pcm = Buffer.alloc(24_000 * 2 * 2) // 2 s
    const out = fromGeminiSpeechResponse(
      {
        candidates: [
          {
            content: {
              parts: [
                { inlineData: { mimeType: 'audio/L16;codec=pcm;rate=24000', data: pcm.toString('base64') } },
              ],
            },
          },
        ],
      },
      12,
    )
    expect(out).toMatchObject({ ok: true, usage: { kind: 'speech', characters: 12, audioTokens: 50 } })
  })

  it.each([
    ['error-400.json', 400, 'upstream_invalid_request'],
    ['error-429.json', 429, 'rate_limit_exceeded'],
    ['error-503.json', 503, 'upstream_error'],
  ])('an upstream %s is mapped (%i → %s), never quoting the key', async (file, status, code) => {
    const up = await fake({
      [`POST /v1beta/models/${TTS}:generateContent`]: recorded(file, () => up.origin, status),
    })
    const err = await createGeminiMediaAdapter()
      .submit(job('speech', { prompt: 'hi' }, TTS), call(up))
      .catch((e: unknown) => e)
    expect(err).toBeInstanceOf(GatewayError)
    expect((err as GatewayError).code).toBe(code)
    expect((err as GatewayError).message).not.toContain(KEY)
  })
})

describe('Veo video', () => {
  it('starts an operation with the frames fetched through the guarded fetch, polls it to its end and downloads the MP4', async () => {
    let polls = 0
    const up = await fake({
      [`POST /v1beta/models/${VEO}:predictLongRunning`]: recorded(
        'veo-operation-started.json',
        () => up.origin,
      ),
      [`GET /v1beta/${OPERATION}`]: (req, res) => {
        polls++
        recorded(polls < 3 ? 'veo-operation-running.json' : 'veo-operation-done.json', () => up.origin)(
          req,
          res,
        )
      },
      'GET /v1beta/files/k3v9d0b2x8qa:download': (_req, res) => {
        res.writeHead(200, { 'content-type': 'video/mp4' })
        res.end(MP4)
      },
    })
    const png = Buffer.from('89504e470d0a1a0a-first-frame', 'latin1')
    const fetched: string[] = []
    const c = call(up, {
      fetchUserMedia: async (url) => {
        fetched.push(url)
        return { data: png, contentType: 'image/png' }
      },
    })
    const adapter = reading(createGeminiMediaAdapter())
    const j = job(
      'video-a',
      {
        prompt: 'a lighthouse in a storm',
        resolution: '1080P',
        duration: 6,
        negative_prompt: 'people',
        first_frame_url: 'https://images.example.com/first.png',
        reference_image_urls: ['https://images.example.com/ref.png'],
      },
      VEO,
    )
    let step: ReadStep = await adapter.submit(j, c)
    expect(step).toEqual({ state: 'pending', job: { operation: OPERATION } })
    expect(fetched).toEqual(['https://images.example.com/first.png', 'https://images.example.com/ref.png'])
    const image = { bytesBase64Encoded: png.toString('base64'), mimeType: 'image/png' }
    expect(up.requests[0]!.body).toEqual({
      instances: [
        { prompt: 'a lighthouse in a storm', image, referenceImages: [{ image, referenceType: 'asset' }] },
      ],
      parameters: { aspectRatio: '16:9', resolution: '1080p', durationSeconds: 6, negativePrompt: 'people' },
    })
    expect(up.requests[0]!.headers['x-goog-api-key']).toBe(KEY)
    for (let i = 0; i < 5 && step.state === 'pending'; i++) step = await adapter.poll(j, step.job, c)
    expect(polls).toBe(3)
    if (step.state !== 'done') throw new Error(JSON.stringify(step))
    expect(step.result.outputs).toHaveLength(1)
    expect(step.result.outputs[0]!.contentType).toBe('video/mp4')
    expect(step.result.outputs[0]!.data.equals(MP4)).toBe(true)
    expect(step.result.usage).toEqual({ kind: 'video', seconds: 6, resolution: '1080P' })
    const download = up.requests.find((r) => r.path.startsWith('/v1beta/files/'))
    expect(download?.headers['x-goog-api-key']).toBe(KEY)
  })

  it('an operation that ends in an error or is filtered fails the task', async () => {
    expect(
      readVeoOperation(veoOperationSchema.parse(readJsonFixture('gemini/veo-operation-error.json'))),
    ).toEqual({
      state: 'failed',
      code: 'upstream_failed',
      message: 'video generation failed: Video generation failed due to an internal error.',
    })
    const filtered = readVeoOperation(
      veoOperationSchema.parse(readJsonFixture('gemini/veo-operation-filtered.json')),
    )
    expect(filtered).toMatchObject({ state: 'failed', code: 'content_filter' })
    const up = await fake({
      [`GET /v1beta/${OPERATION}`]: recorded('veo-operation-filtered.json', () => up.origin),
    })
    const step = await reading(createGeminiMediaAdapter()).poll(
      job('video-a', { prompt: 'x' }, VEO),
      { operation: OPERATION },
      call(up),
    )
    expect(step).toMatchObject({ state: 'failed', code: 'content_filter' })
  })

  it('a video larger than maxOutputBytes is refused, and a stored operation name that leaves the path is never requested', async () => {
    const up = await fake({
      [`GET /v1beta/${OPERATION}`]: recorded('veo-operation-done.json', () => up.origin),
      'GET /v1beta/files/k3v9d0b2x8qa:download': (_req, res) => {
        res.writeHead(200, { 'content-type': 'video/mp4' })
        res.end(MP4)
      },
    })
    const j = job('video-a', { prompt: 'x' }, VEO)
    const err = await reading(createGeminiMediaAdapter())
      .poll(j, { operation: OPERATION }, call(up, {}, 1024))
      .catch((e: unknown) => e)
    expect((err as GatewayError).code).toBe('upstream_error')
    const before = up.requests.length
    const bad = await createGeminiMediaAdapter()
      .poll(j, { operation: '../../v1/admin' }, call(up))
      .catch((e: unknown) => e)
    expect(bad).toBeInstanceOf(GatewayError)
    expect(up.requests.length).toBe(before)
  })

  it('a frame URL that is not an image is refused before anything is sent upstream', async () => {
    const up = await fake({})
    const err = await createGeminiMediaAdapter()
      .submit(
        job('video-a', { prompt: 'x', first_frame_url: 'https://images.example.com/x' }, VEO),
        call(up, { fetchUserMedia: async () => ({ data: Buffer.from('<html>'), contentType: 'text/html' }) }),
      )
      .catch((e: unknown) => e)
    expect((err as GatewayError).code).toBe('invalid_value')
    expect(up.requests).toHaveLength(0)
  })

  it('follows the download redirect on the API origin with the key; one to plain http elsewhere is refused unsent', async () => {
    const elsewhere = await fake({
      'GET /stolen': (_req, res) => {
        res.end('x')
      },
    })
    let target = '/storage/video.mp4'
    const up = await fake({
      [`GET /v1beta/${OPERATION}`]: recorded('veo-operation-done.json', () => up.origin),
      'GET /v1beta/files/k3v9d0b2x8qa:download': (_req, res) => {
        res.writeHead(302, { location: target })
        res.end()
      },
      'GET /storage/video.mp4': (_req, res) => {
        res.writeHead(200, { 'content-type': 'video/mp4' })
        res.end(MP4)
      },
    })
    const j = job('video-a', { prompt: 'x' }, VEO)
    const step = await reading(createGeminiMediaAdapter()).poll(j, { operation: OPERATION }, call(up))
    if (step.state !== 'done') throw new Error(JSON.stringify(step))
    expect(step.result.outputs[0]!.data.equals(MP4)).toBe(true)
    expect(up.requests.find((r) => r.path === '/storage/video.mp4')?.headers['x-goog-api-key']).toBe(KEY)

    target = `${elsewhere.origin}/stolen`
    const err = await reading(createGeminiMediaAdapter())
      .poll(j, { operation: OPERATION }, call(up))
      .catch((e: unknown) => e)
    expect((err as GatewayError).code).toBe('upstream_error')
    expect(elsewhere.requests).toHaveLength(0)
  })
})

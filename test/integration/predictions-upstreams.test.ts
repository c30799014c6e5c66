import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { mockImage, mockSpeech } from '../../src/providers/mock/media.ts'
import { readFixture } from '../support/fixtures.ts'
import { sendJson, startFakeUpstream, type FakeHandler, type FakeUpstream } from '../support/fake-upstream.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// The whole life of a prediction through the gateway (HTTP API, runner, real adapter, output store,
// billing) against a fake of each upstream on 127.0.0.1: success with its bytes downloadable from
// the gateway, upstream failure, timeout and cancel. The runner is stepped with a fake clock; the
// adapters' HTTP is real.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const PNG = mockImage('from the fake upstream', 0, '1:1')
const MP4 = Buffer.concat([
  Buffer.from('\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2', 'latin1'),
  Buffer.alloc(512, 1),
])
const OPERATION = 'models/veo-3.1-generate-preview/operations/3sq1ywuzq2kx'
const SEEDANCE = '7m0bq3x1rdrj20cr5mbtq3vd1w'

interface Setup {
  up: FakeUpstream
  gw: TestGateway
  create(body: unknown): Promise<string>
  /** Advances the clock past every wait and runs the due steps, `n` times. */
  step(n?: number, ms?: number): Promise<void>
  lookup(id: string): Promise<Record<string, any>> // eslint-disable-line @typescript-eslint/no-explicit-any -- response bodies
  download(url: string): Promise<Buffer>
  usage(): Promise<number>
}

async function setup(routes: Record<string, FakeHandler>, file: unknown = {}): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), 'junction-pred-up-'))
  dirs.push(dir)
  const up = await startFakeUpstream(routes)
  const clock = { t: 1_800_000_000_000 }
  const gw = await startGateway({
    env: {
      GATEWAY_OUTPUTS_DIR: dir,
      OPENAI_API_KEY: 'sk-test',
      OPENAI_BASE_URL: `${up.origin}/v1`,
      GEMINI_API_KEY: 'test-key',
      GEMINI_BASE_URL: up.origin,
      REPLICATE_API_TOKEN: 'r8-test',
      REPLICATE_BASE_URL: up.origin,
    },
    file,
    overrides: { now: () => clock.t, background: false },
  })
  onTestFinished(async () => {
    await up.close()
    await gw.close()
  })
  return {
    up,
    gw,
    async create(body) {
      const res = await gw.app.inject({
        method: 'POST',
        url: '/v1/predictions',
        headers: devAuth,
        payload: body as object,
      })
      expect(res.statusCode, res.body).toBe(200)
      return res.json().data.task_id as string
    },
    async step(n = 1, ms = 60_000) {
      for (let i = 0; i < n; i++) {
        clock.t += ms
        await gw.deps.runner.runOnce()
      }
    },
    async lookup(id) {
      return (await gw.app.inject({ method: 'GET', url: `/v1/predictions/${id}`, headers: devAuth })).json()
    },
    async download(url) {
      const u = new URL(url)
      const res = await gw.app.inject({ method: 'GET', url: u.pathname + u.search })
      expect(res.statusCode).toBe(200)
      return res.rawPayload
    },
    async usage() {
      return (await gw.app.inject({ method: 'GET', url: '/v1/credits', headers: devAuth })).json().data
        .total_usage
    },
  }
}

const json =
  (body: unknown, status = 200): FakeHandler =>
  (_req, res) =>
    sendJson(res, status, body)

const moved =
  (file: string, origin: () => string, status = 200): FakeHandler =>
  (_req, res) =>
    sendJson(
      res,
      status,
      JSON.parse(
        readFixture(file)
          .replaceAll('https://api.replicate.com', origin())
          .replaceAll('https://replicate.delivery', origin())
          .replaceAll('https://generativelanguage.googleapis.com', origin()),
      ),
    )

describe('OpenAI images through the gateway', () => {
  it('success: the PNG is hosted by the gateway and the task billed at its tier', async () => {
    const s = await setup({
      'POST /v1/images/generations': json({
        created: 1,
        data: [{ b64_json: PNG.toString('base64') }],
        size: '1024x1024',
      }),
    })
    const id = await s.create({
      model: 'openai/gpt-image-1',
      input: { prompt: 'a fox', aspect_ratio: '1:1' },
    })
    await s.step()
    const body = await s.lookup(id)
    expect(body.data.task_status).toBe('success')
    expect((await s.download(body.data.output[0].image)).equals(PNG)).toBe(true)
    expect(body.usage).toEqual({ upstream_cost: 0.042, discount: 0, discount_percent: 0, cost: 0.042 })
    expect(await s.usage()).toBe(0.042)
    expect(s.up.requests[0]!.headers.authorization).toBe('Bearer sk-test')
  })

  it('an upstream refusal fails the task with its message; nothing is billed', async () => {
    const s = await setup({})
    s.up.setHandler(
      'POST /v1/images/generations',
      moved('openai-compat/images-moderation-400.json', () => s.up.origin, 400),
    )
    const id = await s.create({ model: 'openai/gpt-image-1', input: { prompt: 'forbidden' } })
    await s.step()
    const body = await s.lookup(id)
    expect(body.data.task_status).toBe('failed')
    expect(body.data.error.code).toBe('upstream_invalid_request')
    expect(body.data.error.message).not.toContain('sk-test')
    expect(await s.usage()).toBe(0)
  })
})

describe('Gemini speech through the gateway', () => {
  it('success: WAV with the upstream PCM, billed by audio tokens', async () => {
    const pcm = mockSpeech('one two three').data
    const s = await setup({
      'POST /v1beta/models/gemini-2.5-flash-preview-tts:generateContent': json({
        candidates: [
          {
            content: {
              parts: [
                { inlineData: { mimeType: 'audio/L16;codec=pcm;rate=24000', data: pcm.toString('base64') } },
              ],
            },
          },
        ],
        usageMetadata: {
          candidatesTokenCount: 20,
          candidatesTokensDetails: [{ modality: 'AUDIO', tokenCount: 20 }],
        },
      }),
    })
    const id = await s.create({
      model: 'google/gemini-2.5-flash-preview-tts',
      input: { prompt: 'one two three', output_format: 'wav' },
    })
    await s.step()
    const body = await s.lookup(id)
    expect(body.data.task_status).toBe('success')
    const wav = await s.download(body.data.output[0].audio)
    expect(wav.subarray(0, 4).toString('latin1')).toBe('RIFF')
    expect(wav.subarray(8, 12).toString('latin1')).toBe('WAVE')
    expect(wav.subarray(44).equals(pcm)).toBe(true)
    // $10 per million audio tokens × 20.
    expect(body.usage.upstream_cost).toBe(0.0002)
  })

  it('a speech model priced per character is charged its characters; priced both ways, both', async () => {
    const pcm = mockSpeech('one two three').data
    const answer = json({
      candidates: [
        {
          content: {
            parts: [
              { inlineData: { mimeType: 'audio/L16;codec=pcm;rate=24000', data: pcm.toString('base64') } },
            ],
          },
        },
      ],
      usageMetadata: { candidatesTokensDetails: [{ modality: 'AUDIO', tokenCount: 20 }] },
    })
    const s = await setup(
      {
        'POST /v1beta/models/tts-by-characters:generateContent': answer,
        'POST /v1beta/models/tts-both:generateContent': answer,
      },
      {
        models: [
          {
            slug: 'google/tts-by-characters',
            type: 'speech',
            pricing: { speechPerMillionCharacters: 1000 },
          },
          {
            slug: 'google/tts-both',
            type: 'speech',
            pricing: { speechPerMillionCharacters: 1000, speechAudioTokens: 100 },
          },
        ],
      },
    )
    const input = { prompt: 'one two three', style_instructions: 'Say it slowly:', output_format: 'wav' }
    const chars = await s.create({ model: 'google/tts-by-characters', input })
    const both = await s.create({ model: 'google/tts-both', input })
    await s.step()
    // 13 + 14 characters (prompt and style instructions, as sent) at $1 000 per million.
    expect((await s.lookup(chars)).usage.upstream_cost).toBe(0.027)
    // …plus 20 audio tokens at $100 per million.
    expect((await s.lookup(both)).usage.upstream_cost).toBe(0.029)
    expect(await s.usage()).toBe(0.056)
  })
})

describe('Veo through the gateway', () => {
  it('success after polling the operation; the MP4 is hosted and billed per second', async () => {
    let polls = 0
    const s = await setup({})
    s.up.setHandler(
      'POST /v1beta/models/veo-3.1-generate-preview:predictLongRunning',
      json({ name: OPERATION }),
    )
    s.up.setHandler(`GET /v1beta/${OPERATION}`, (req, res) =>
      moved(
        polls++ < 1 ? 'gemini/veo-operation-running.json' : 'gemini/veo-operation-done.json',
        () => s.up.origin,
      )(req, res),
    )
    s.up.setHandler('GET /v1beta/files/k3v9d0b2x8qa:download', (_req, res) => {
      res.writeHead(200, { 'content-type': 'video/mp4' })
      res.end(MP4)
    })
    const id = await s.create({
      model: 'google/veo-3.1-generate-preview',
      input: { prompt: 'waves', duration: 4 },
    })
    await s.step(3)
    const body = await s.lookup(id)
    expect(body.data.task_status).toBe('success')
    const video = await s.download(body.data.output[0].video)
    expect(video.subarray(4, 8).toString('latin1')).toBe('ftyp')
    // $0.40 a second at 720P, 4 s.
    expect(body.usage.cost).toBe(1.6)
  })

  it('an operation that never ends times the task out, unbilled', async () => {
    const s = await setup({}, { predictions: { maxTaskMs: 300_000 } })
    s.up.setHandler(
      'POST /v1beta/models/veo-3.1-generate-preview:predictLongRunning',
      json({ name: OPERATION }),
    )
    s.up.setHandler(
      `GET /v1beta/${OPERATION}`,
      moved('gemini/veo-operation-running.json', () => s.up.origin),
    )
    const id = await s.create({ model: 'google/veo-3.1-generate-preview', input: { prompt: 'forever' } })
    await s.step(6)
    const body = await s.lookup(id)
    expect(body.data).toMatchObject({ task_status: 'failed', error: { code: 'timeout' } })
    expect(await s.usage()).toBe(0)
  })
})

describe('Replicate through the gateway', () => {
  it('cancel: the Replicate prediction is cancelled upstream and nothing is billed', async () => {
    const s = await setup({})
    s.up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      moved('replicate/flux-starting.json', () => s.up.origin, 201),
    )
    s.up.setHandler(
      `GET /v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c`,
      moved('replicate/flux-processing.json', () => s.up.origin),
    )
    s.up.setHandler(
      `POST /v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c/cancel`,
      moved('replicate/seedance-canceled.json', () => s.up.origin),
    )
    const id = await s.create({
      model: 'replicate/bytedance/seedance-1-lite',
      input: { prompt: 'x', duration: 5 },
    })
    await s.step()
    const res = await s.gw.app.inject({
      method: 'POST',
      url: `/v1/predictions/${id}/cancel`,
      headers: devAuth,
    })
    expect(res.json().data.task_status).toBe('cancelled')
    await s.step()
    const cancels = s.up.requests.filter((r) => r.path.endsWith('/cancel'))
    expect(cancels).toHaveLength(1)
    expect(cancels[0]!.headers.authorization).toBe('Bearer r8-test')
    expect(await s.usage()).toBe(0)
  })

  it('success after polling, and a failed prediction fails the task', async () => {
    const s = await setup({})
    s.up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      moved('replicate/seedance-succeeded.json', () => s.up.origin, 201),
    )
    s.up.setHandler(
      `GET /v1/predictions/${SEEDANCE}`,
      moved('replicate/seedance-succeeded.json', () => s.up.origin),
    )
    s.up.setHandler('GET /xezq/def/output.mp4', (_req, res) => {
      res.writeHead(200, { 'content-type': 'video/mp4' })
      res.end(MP4)
    })
    const id = await s.create({
      model: 'replicate/bytedance/seedance-1-lite',
      input: { prompt: 'waves at dusk', duration: 5, resolution: '480P' },
    })
    await s.step(2)
    const ok = await s.lookup(id)
    expect(ok.data.task_status).toBe('success')
    expect((await s.download(ok.data.output[0].video)).equals(MP4)).toBe(true)
    // $0.018 a second at 480P, 5 s.
    expect(ok.usage.cost).toBe(0.09)

    s.up.setHandler(
      `GET /v1/predictions/${SEEDANCE}`,
      moved('replicate/seedance-failed.json', () => s.up.origin),
    )
    s.up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      moved('replicate/seedance-failed.json', () => s.up.origin, 201),
    )
    const failedId = await s.create({ model: 'replicate/bytedance/seedance-1-lite', input: { prompt: 'y' } })
    await s.step(2)
    const failed = await s.lookup(failedId)
    expect(failed.data.task_status).toBe('failed')
    expect(failed.data.error.code).toBe('upstream_failed')
    expect(failed.usage.cost).toBe(0)
  })
})

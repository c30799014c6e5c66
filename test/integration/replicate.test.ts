import type { ServerResponse } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { GatewayError, UpstreamError } from '../../src/errors.ts'
import type { MediaJob, MediaStep } from '../../src/providers/async-media/types.ts'
import { createReplicateAdapter } from '../../src/providers/replicate/adapter.ts'
import { readFixture } from '../support/fixtures.ts'
import { makeMediaCall, reading } from '../support/media-call.ts'
import { sendJson, startFakeUpstream, type FakeHandler, type FakeUpstream } from '../support/fake-upstream.ts'

// The Replicate adapter's real HTTP code against a fake Replicate on 127.0.0.1 that answers with
// recorded prediction objects (their api.replicate.com and replicate.delivery URLs moved to the fake).

const KEY = 'sk-test'
const FLUX_ID = 'qfzb3wqrtxrj00cr5m9v8k7h2c'
const SEEDANCE_ID = '7m0bq3x1rdrj20cr5mbtq3vd1w'
const PNG_0 = Buffer.from('89504e470d0a1a0a00000000output-zero', 'latin1')
const PNG_1 = Buffer.from('RIFF\x00\x00\x00\x00WEBPoutput-one', 'latin1')
const MP4 = Buffer.concat([Buffer.from('\x00\x00\x00\x18ftypmp42', 'latin1'), Buffer.alloc(2048, 7)])

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function fake(routes: Record<string, FakeHandler>): Promise<FakeUpstream> {
  const f = await startFakeUpstream(routes)
  cleanups.push(() => f.close())
  return f
}

/** A recorded prediction with Replicate's hosts replaced by the fake's origin. */
const recorded =
  (name: string, origin: () => string, status = 200): FakeHandler =>
  (_req, res) => {
    const text = readFixture(`replicate/${name}`)
      .replaceAll('https://api.replicate.com', origin())
      .replaceAll('https://replicate.delivery', origin())
    sendJson(res, status, JSON.parse(text))
  }

const bytes =
  (data: Buffer, contentType: string): FakeHandler =>
  (_req, res: ServerResponse) => {
    res.writeHead(200, { 'content-type': contentType })
    res.end(data)
  }

const fluxJob: MediaJob = {
  taskId: '0123456789abcdef0123456789abcdef',
  upstreamModel: 'black-forest-labs/flux-schnell',
  family: 'image',
  input: {
    prompt: 'a red bicycle',
    aspect_ratio: '16:9',
    image_urls: [],
    num_images: 2,
    output_format: 'webp',
  },
}

const seedanceJob: MediaJob = {
  taskId: '0123456789abcdef0123456789abcdef',
  upstreamModel: 'bytedance/seedance-1-lite',
  family: 'video-b',
  input: {
    prompt: 'waves at dusk',
    aspect_ratio: '16:9',
    resolution: '480P',
    duration: 5,
    reference_image_urls: [],
  },
}

const soraJob: MediaJob = {
  taskId: '0123456789abcdef0123456789abcdef',
  upstreamModel: 'openai/sora-2',
  family: 'video-c',
  input: { prompt: 'a cat', aspect_ratio: '16:9', resolution: '720P', duration: 4 },
}

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p
  } catch (err) {
    return err as Error
  }
  throw new Error('expected a rejection')
}

function pendingState(step: MediaStep): MediaStep & { state: 'pending' } {
  if (step.state !== 'pending') throw new Error(`expected pending, got ${step.state}`)
  return step
}

describe('Replicate adapter', () => {
  it('submits to the model predictions path with the token, the mapped input and no Prefer: wait', async () => {
    const up = await fake({})
    up.setHandler(
      'POST /v1/models/black-forest-labs/flux-schnell/predictions',
      recorded('flux-starting.json', () => up.origin, 201),
    )
    const adapter = reading(createReplicateAdapter())
    const step = await adapter.submit(
      fluxJob,
      makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
    )

    expect(step).toEqual({
      state: 'pending',
      job: {
        id: FLUX_ID,
        getUrl: `${up.origin}/v1/predictions/${FLUX_ID}`,
        cancelUrl: `${up.origin}/v1/predictions/${FLUX_ID}/cancel`,
      },
    })
    expect(up.requests).toHaveLength(1)
    const req = up.requests[0]!
    expect(req.method).toBe('POST')
    expect(req.headers.authorization).toBe(`Bearer ${KEY}`)
    expect(req.headers['content-type']).toBe('application/json')
    expect(req.headers.prefer).toBeUndefined()
    expect(req.body).toEqual({
      input: { prompt: 'a red bicycle', num_outputs: 2, aspect_ratio: '16:9', output_format: 'webp' },
    })
  })

  it('polls pending → pending → succeeded and downloads every output exactly', async () => {
    const up = await fake({
      'GET /xezq/abc/out-0.webp': bytes(PNG_0, 'image/webp'),
      'GET /xezq/abc/out-1.webp': bytes(PNG_1, 'application/octet-stream'),
    })
    up.setHandler(
      'POST /v1/models/black-forest-labs/flux-schnell/predictions',
      recorded('flux-starting.json', () => up.origin, 201),
    )
    const answers = ['flux-starting.json', 'flux-processing.json', 'flux-succeeded.json']
    let polls = 0
    up.setHandler(`GET /v1/predictions/${FLUX_ID}`, (req, res) =>
      recorded(answers[polls++]!, () => up.origin)(req, res),
    )
    const adapter = reading(createReplicateAdapter())
    const call = makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY })

    const submitted = pendingState(await adapter.submit(fluxJob, call))
    const first = pendingState(await adapter.poll(fluxJob, submitted.job, call))
    expect(first.job).toEqual(submitted.job)
    const second = pendingState(await adapter.poll(fluxJob, first.job, call))
    const done = await adapter.poll(fluxJob, second.job, call)

    expect(done).toEqual({
      state: 'done',
      result: {
        outputs: [
          { type: 'image', contentType: 'image/webp', data: PNG_0 },
          { type: 'image', contentType: 'image/webp', data: PNG_1 },
        ],
        usage: { kind: 'images', count: 2, tier: '1K' },
      },
    })
    const paths = up.requests.map((r) => `${r.method} ${r.path}`)
    expect(paths).toEqual([
      'POST /v1/models/black-forest-labs/flux-schnell/predictions',
      `GET /v1/predictions/${FLUX_ID}`,
      `GET /v1/predictions/${FLUX_ID}`,
      `GET /v1/predictions/${FLUX_ID}`,
      'GET /xezq/abc/out-0.webp',
      'GET /xezq/abc/out-1.webp',
    ])
    // Every request went to the configured origin: all of them carry the token.
    for (const r of up.requests) expect(r.headers.authorization).toBe(`Bearer ${KEY}`)
  })

  it('a video: one string output, billed by the seconds and resolution asked', async () => {
    const up = await fake({ 'GET /xezq/def/output.mp4': bytes(MP4, 'video/mp4') })
    up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      recorded('seedance-succeeded.json', () => up.origin, 201),
    )
    const adapter = reading(createReplicateAdapter())
    const step = await adapter.submit(
      seedanceJob,
      makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
    )

    expect(step).toEqual({
      state: 'done',
      result: {
        outputs: [{ type: 'video', contentType: 'video/mp4', data: MP4 }],
        usage: { kind: 'video', seconds: 5, resolution: '480P' },
      },
    })
    expect(up.requests[0]!.body).toEqual({
      input: { prompt: 'waves at dusk', duration: 5, resolution: '480p', aspect_ratio: '16:9' },
    })
  })

  it('sora-2: seconds and orientation in the request', async () => {
    const up = await fake({})
    up.setHandler(
      'POST /v1/models/openai/sora-2/predictions',
      recorded('flux-starting.json', () => up.origin, 201),
    )
    await reading(createReplicateAdapter()).submit(
      soraJob,
      makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
    )
    expect(up.requests[0]!.body).toEqual({
      input: { prompt: 'a cat', seconds: 4, aspect_ratio: 'landscape' },
    })
  })

  it('a failed prediction is a failed step with the model error, the key scrubbed out', async () => {
    const up = await fake({})
    up.setHandler(`GET /v1/predictions/${SEEDANCE_ID}`, (_req, res) => {
      const p = JSON.parse(readFixture('replicate/seedance-failed.json')) as Record<string, unknown>
      sendJson(res, 200, { ...p, error: `${String(p.error)} (auth Bearer ${KEY}, key ${KEY})` })
    })
    const call = makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY })
    const state = {
      id: SEEDANCE_ID,
      getUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}`,
      cancelUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}/cancel`,
    }
    const step = await reading(createReplicateAdapter()).poll(seedanceJob, state, call)
    expect(step).toMatchObject({ state: 'failed', code: 'upstream_failed' })
    const message = (step as { message: string }).message
    expect(message).toContain('E005: The input or output was flagged as sensitive.')
    expect(message).not.toContain(KEY)
  })

  it('a canceled prediction is a cancelled step', async () => {
    const up = await fake({})
    up.setHandler(
      `GET /v1/predictions/${SEEDANCE_ID}`,
      recorded('seedance-canceled.json', () => up.origin),
    )
    const state = {
      id: SEEDANCE_ID,
      getUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}`,
      cancelUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}/cancel`,
    }
    const step = await reading(createReplicateAdapter()).poll(
      seedanceJob,
      state,
      makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
    )
    expect(step).toMatchObject({ state: 'failed', code: 'cancelled' })
  })

  it('cancel POSTs the prediction cancel URL with the token', async () => {
    const up = await fake({})
    up.setHandler(
      `POST /v1/predictions/${SEEDANCE_ID}/cancel`,
      recorded('seedance-canceled.json', () => up.origin),
    )
    const state = {
      id: SEEDANCE_ID,
      getUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}`,
      cancelUrl: `${up.origin}/v1/predictions/${SEEDANCE_ID}/cancel`,
    }
    await reading(createReplicateAdapter()).cancel!(
      seedanceJob,
      state,
      makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
    )
    expect(up.requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      `POST /v1/predictions/${SEEDANCE_ID}/cancel`,
    ])
    expect(up.requests[0]!.headers.authorization).toBe(`Bearer ${KEY}`)
  })

  it('a stored state naming another origin is refused without a request', async () => {
    const up = await fake({})
    const other = await fake({})
    const state = {
      id: 'x',
      getUrl: `${other.origin}/v1/predictions/x`,
      cancelUrl: `${other.origin}/v1/predictions/x/cancel`,
    }
    const err = await rejection(
      reading(createReplicateAdapter()).poll(
        seedanceJob,
        state,
        makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
      ),
    )
    expect(err).toBeInstanceOf(UpstreamError)
    expect(other.requests).toHaveLength(0)
  })

  it('an input the model refuses (422) is a 400 with its detail', async () => {
    const up = await fake({})
    up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      recorded('error-422.json', () => up.origin, 422),
    )
    const err = await rejection(
      reading(createReplicateAdapter()).submit(
        seedanceJob,
        makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
      ),
    )
    expect(err).toBeInstanceOf(GatewayError)
    expect(err).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(err.message).toContain('input.duration: Must be less than or equal to 12')
  })

  it('a refused token is a 502 whose message never holds the key', async () => {
    const up = await fake({})
    up.setHandler('POST /v1/models/bytedance/seedance-1-lite/predictions', (_req, res) =>
      sendJson(res, 401, { title: 'Unauthenticated', detail: `Invalid token ${KEY}`, status: 401 }),
    )
    const err = await rejection(
      reading(createReplicateAdapter()).submit(
        seedanceJob,
        makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
      ),
    )
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(err.message).not.toContain(KEY)
  })

  it('an output larger than maxOutputBytes is a 502', async () => {
    const up = await fake({ 'GET /xezq/def/output.mp4': bytes(MP4, 'video/mp4') })
    up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      recorded('seedance-succeeded.json', () => up.origin, 201),
    )
    const call = makeMediaCall({
      kind: 'replicate',
      baseUrl: up.origin,
      apiKey: KEY,
      maxOutputBytes: MP4.length - 1,
    })
    const err = await rejection(reading(createReplicateAdapter()).submit(seedanceJob, call))
    expect(err).toBeInstanceOf(UpstreamError)
    expect(err).toMatchObject({
      status: 502,
      message: `upstream replicate: output larger than ${MP4.length - 1} bytes`,
    })
  })

  it('an output URL on another plain-http host is not fetched (the token never leaves the origin)', async () => {
    const up = await fake({})
    const elsewhere = await fake({ 'GET /xezq/def/output.mp4': bytes(MP4, 'video/mp4') })
    up.setHandler('POST /v1/models/bytedance/seedance-1-lite/predictions', (_req, res) => {
      const text = readFixture('replicate/seedance-succeeded.json')
        .replaceAll('https://api.replicate.com', up.origin)
        .replaceAll('https://replicate.delivery', elsewhere.origin)
      sendJson(res, 201, JSON.parse(text))
    })
    const err = await rejection(
      reading(createReplicateAdapter()).submit(
        seedanceJob,
        makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
      ),
    )
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(elsewhere.requests).toHaveLength(0)
  })

  it('a failed download is a retryable 502', async () => {
    const up = await fake({})
    up.setHandler(
      'POST /v1/models/bytedance/seedance-1-lite/predictions',
      recorded('seedance-succeeded.json', () => up.origin, 201),
    )
    const err = await rejection(
      reading(createReplicateAdapter()).submit(
        seedanceJob,
        makeMediaCall({ kind: 'replicate', baseUrl: up.origin, apiKey: KEY }),
      ),
    )
    expect(err).toMatchObject({
      status: 502,
      retryable: true,
      message: 'upstream replicate output download failed (404)',
    })
  })
})

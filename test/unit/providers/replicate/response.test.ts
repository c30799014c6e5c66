import { describe, expect, it } from 'vitest'
import type { MediaJob } from '../../../../src/providers/async-media/types.ts'
import {
  outputContentType,
  parseReplicateState,
  readReplicatePrediction,
  replicateUsage,
  toReplicateState,
} from '../../../../src/providers/replicate/response.ts'
import { fromReplicateError } from '../../../../src/providers/replicate/errors.ts'
import { replicatePredictionSchema } from '../../../../src/providers/replicate/wire.ts'
import { readFixture, readJsonFixture } from '../../../support/fixtures.ts'

const prediction = (name: string) => replicatePredictionSchema.parse(readJsonFixture(`replicate/${name}`))
const ids = { taskId: '0123456789abcdef0123456789abcdef' }
const BASE = 'https://api.replicate.com'

describe('readReplicatePrediction', () => {
  it('starting and processing are pending', () => {
    expect(readReplicatePrediction(prediction('flux-starting.json'))).toEqual({ state: 'pending' })
    expect(readReplicatePrediction(prediction('flux-processing.json'))).toEqual({ state: 'pending' })
  })

  it('succeeded: an array output gives every URL, a string output one', () => {
    expect(readReplicatePrediction(prediction('flux-succeeded.json'))).toEqual({
      state: 'succeeded',
      outputUrls: [
        'https://replicate.delivery/xezq/abc/out-0.webp',
        'https://replicate.delivery/xezq/abc/out-1.webp',
      ],
    })
    expect(readReplicatePrediction(prediction('seedance-succeeded.json'))).toEqual({
      state: 'succeeded',
      outputUrls: ['https://replicate.delivery/xezq/def/output.mp4'],
    })
  })

  it('failed keeps the model error text; canceled is cancelled', () => {
    expect(readReplicatePrediction(prediction('seedance-failed.json'))).toEqual({
      state: 'failed',
      code: 'upstream_failed',
      message: 'E005: The input or output was flagged as sensitive. Please try again with different inputs.',
    })
    expect(readReplicatePrediction(prediction('seedance-canceled.json'))).toMatchObject({
      state: 'failed',
      code: 'cancelled',
    })
  })

  it('a failure message is scrubbed of the key and cut short', () => {
    const p = { ...prediction('seedance-failed.json'), error: `bad token sk-test ${'x'.repeat(1000)}` }
    const r = readReplicatePrediction(p, ['sk-test'])
    expect(r.state).toBe('failed')
    const message = (r as { message: string }).message
    expect(message).not.toContain('sk-test')
    expect(message.startsWith('bad token [redacted] xxx')).toBe(true)
    expect(message.length).toBe(301)
  })

  it('a success without output is a failure', () => {
    const p = { ...prediction('flux-succeeded.json'), output: [] }
    expect(readReplicatePrediction(p)).toMatchObject({ state: 'failed', code: 'upstream_failed' })
  })
})

describe('state', () => {
  it('keeps Replicate urls on the base origin', () => {
    expect(toReplicateState(prediction('flux-starting.json'), BASE)).toEqual({
      id: 'qfzb3wqrtxrj00cr5m9v8k7h2c',
      getUrl: 'https://api.replicate.com/v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c',
      cancelUrl: 'https://api.replicate.com/v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c/cancel',
    })
  })

  it('replaces urls on another origin by the documented paths under the base URL', () => {
    expect(toReplicateState(prediction('flux-starting.json'), 'http://127.0.0.1:9/')).toEqual({
      id: 'qfzb3wqrtxrj00cr5m9v8k7h2c',
      getUrl: 'http://127.0.0.1:9/v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c',
      cancelUrl: 'http://127.0.0.1:9/v1/predictions/qfzb3wqrtxrj00cr5m9v8k7h2c/cancel',
    })
  })

  it('reads back only a state on the base origin', () => {
    const s = toReplicateState(prediction('flux-starting.json'), BASE)
    expect(parseReplicateState({ ...s }, BASE)).toEqual(s)
    expect(parseReplicateState({ ...s, getUrl: 'https://evil.example/x' }, BASE)).toBeUndefined()
    expect(parseReplicateState('x', BASE)).toBeUndefined()
    expect(parseReplicateState(null, BASE)).toBeUndefined()
  })
})

describe('replicateUsage', () => {
  it('images are counted at 1K', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'black-forest-labs/flux-schnell',
      family: 'image',
      input: { prompt: 'p', image_urls: [], num_images: 4 },
    }
    expect(replicateUsage(job, 3)).toEqual({ kind: 'images', count: 3, tier: '1K' })
  })

  it('video seconds and resolution come from the input, 720P when none was asked', () => {
    const b: MediaJob = {
      ...ids,
      upstreamModel: 'bytedance/seedance-1-lite',
      family: 'video-b',
      input: { prompt: 'p', duration: 6, resolution: '480P', reference_image_urls: [] },
    }
    expect(replicateUsage(b, 1)).toEqual({ kind: 'video', seconds: 6, resolution: '480P' })
    expect(replicateUsage({ ...b, input: { ...b.input, resolution: undefined } }, 1)).toEqual({
      kind: 'video',
      seconds: 6,
      resolution: '720P',
    })
    const c: MediaJob = {
      ...ids,
      upstreamModel: 'openai/sora-2',
      family: 'video-c',
      input: { prompt: 'p', aspect_ratio: '16:9', resolution: '1080P', duration: 12 },
    }
    expect(replicateUsage(c, 1)).toEqual({ kind: 'video', seconds: 12, resolution: '1080P' })
  })
})

describe('outputContentType', () => {
  it('header of the right kind, else extension, else the kind default', () => {
    expect(outputContentType('image', 'https://r.d/a.webp', 'image/webp; charset=binary')).toBe('image/webp')
    expect(outputContentType('image', 'https://r.d/a.webp', 'application/octet-stream')).toBe('image/webp')
    expect(outputContentType('video', 'https://r.d/a.mp4', undefined)).toBe('video/mp4')
    expect(outputContentType('video', 'https://r.d/a.png', 'text/html')).toBe('video/mp4')
    expect(outputContentType('image', 'https://r.d/file', undefined)).toBe('image/png')
  })
})

describe('fromReplicateError', () => {
  it('a 422 is the client: 400 with the problem detail', () => {
    const err = fromReplicateError('replicate', 422, readFixture('replicate/error-422.json'), undefined)
    expect(err).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(err.message).toContain('input.duration: Must be less than or equal to 12')
  })

  it('a 401 is the gateway credentials (502), a 429 is rate limited, a 500 a fault', () => {
    expect(
      fromReplicateError('replicate', 401, readFixture('replicate/error-401.json'), undefined),
    ).toMatchObject({
      status: 502,
      code: 'upstream_error',
    })
    expect(fromReplicateError('replicate', 429, '{}', '7')).toMatchObject({
      status: 429,
      headers: { 'retry-after': '7' },
    })
    expect(fromReplicateError('replicate', 500, 'oops', undefined)).toMatchObject({
      status: 502,
      retryable: true,
    })
  })
})

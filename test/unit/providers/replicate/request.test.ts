import { describe, expect, it } from 'vitest'
import type { MediaJob } from '../../../../src/providers/async-media/types.ts'
import {
  toReplicatePredictionsPath,
  toReplicateRequest,
  toSoraOrientation,
} from '../../../../src/providers/replicate/request.ts'
import { thrownGatewayError } from '../../../support/errors.ts'

const ids = { taskId: '0123456789abcdef0123456789abcdef' }

describe('toReplicatePredictionsPath', () => {
  it('is the official model predictions path', () => {
    expect(toReplicatePredictionsPath('black-forest-labs/flux-schnell')).toBe(
      '/v1/models/black-forest-labs/flux-schnell/predictions',
    )
  })

  it.each(['flux-schnell', 'a/b/c', 'owner/name:abc123', 'own er/x'])(
    'refuses %s as a configuration error',
    (m) => {
      expect(thrownGatewayError(() => toReplicatePredictionsPath(m))).toMatchObject({ status: 500 })
    },
  )
})

describe('toReplicateRequest', () => {
  it('image (flux-schnell): prompt, num_outputs, aspect_ratio, jpeg spelled jpg', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'black-forest-labs/flux-schnell',
      family: 'image',
      input: {
        prompt: 'a red bicycle',
        aspect_ratio: '16:9',
        resolution: '1K',
        image_urls: [],
        num_images: 2,
        output_format: 'jpeg',
      },
    }
    expect(toReplicateRequest(job)).toEqual({
      input: { prompt: 'a red bicycle', num_outputs: 2, aspect_ratio: '16:9', output_format: 'jpg' },
    })
  })

  it('image: only what the client gave', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'black-forest-labs/flux-schnell',
      family: 'image',
      input: { prompt: 'p', image_urls: [], num_images: 1 },
    }
    expect(toReplicateRequest(job)).toEqual({ input: { prompt: 'p', num_outputs: 1 } })
  })

  it('image: reference images are refused with a 400', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'black-forest-labs/flux-schnell',
      family: 'image',
      input: { prompt: 'p', image_urls: ['https://example.com/a.png'], num_images: 1 },
    }
    expect(thrownGatewayError(() => toReplicateRequest(job))).toMatchObject({
      status: 400,
      code: 'unsupported_parameter',
      param: 'input.image_urls',
    })
  })

  it('video-b (seedance-1-lite): lower-case resolution, first frame as image, references', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'bytedance/seedance-1-lite',
      family: 'video-b',
      input: {
        prompt: 'waves at dusk',
        aspect_ratio: '4:3',
        resolution: '480P',
        duration: 5,
        first_frame_url: 'https://example.com/first.png',
        reference_image_urls: ['https://example.com/r1.png'],
      },
    }
    expect(toReplicateRequest(job)).toEqual({
      input: {
        prompt: 'waves at dusk',
        duration: 5,
        resolution: '480p',
        aspect_ratio: '4:3',
        image: 'https://example.com/first.png',
        reference_images: ['https://example.com/r1.png'],
      },
    })
  })

  it('video-b: no resolution, ratio or frames sent when absent', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'bytedance/seedance-1-lite',
      family: 'video-b',
      input: { prompt: 'p', duration: 8, reference_image_urls: [] },
    }
    expect(toReplicateRequest(job)).toEqual({ input: { prompt: 'p', duration: 8 } })
  })

  it('video-c (sora-2): seconds, orientation, input_reference; resolution not sent', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'openai/sora-2',
      family: 'video-c',
      input: {
        prompt: 'a cat',
        aspect_ratio: '9:16',
        resolution: '1080P',
        duration: 8,
        first_frame_url: 'https://example.com/ref.png',
      },
    }
    expect(toReplicateRequest(job)).toEqual({
      input: {
        prompt: 'a cat',
        seconds: 8,
        aspect_ratio: 'portrait',
        input_reference: 'https://example.com/ref.png',
      },
    })
    expect(toSoraOrientation('16:9')).toBe('landscape')
  })

  it('refuses speech and video-a models', () => {
    const job: MediaJob = {
      ...ids,
      upstreamModel: 'x/y',
      family: 'speech',
      input: {
        prompt: 'hi',
        style_instructions: 's',
        voice: 'Kore',
        language: 'en-US',
        output_format: 'mp3',
      },
    }
    expect(thrownGatewayError(() => toReplicateRequest(job))).toMatchObject({
      status: 400,
      code: 'unsupported_parameter',
    })
  })
})

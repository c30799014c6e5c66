import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import {
  SPEECH_LANGUAGES,
  SPEECH_VOICES,
  parseMediaInput,
  parsePredictionRequest,
} from '../../../src/schemas/predictions.ts'
import type { MediaFamily } from '../../../src/domain/media.ts'

// Every input rule of docs/design/api-contract.md (generic image and video, the speech model, video models A, B and C),
// checked by the parser the route uses: a violation is a 400 naming `input.<field>`; defaults are
// applied as docs/design/api-contract.md lists them.

function refusal(
  family: MediaFamily,
  input: unknown,
): { status: number; code: string; param: string | null } {
  try {
    parseMediaInput(family, input)
  } catch (err) {
    if (err instanceof GatewayError) return { status: err.status, code: err.code, param: err.param }
    throw err
  }
  throw new Error(`accepted: ${JSON.stringify(input)}`)
}

const url = 'https://example.com/a.png'
const long = (n: number) => 'a'.repeat(n)

describe('speech model input', () => {
  it('applies the defaults of docs/design/api-contract.md', () => {
    expect(parseMediaInput('speech', { prompt: 'Hello [sigh] there' }).input).toEqual({
      prompt: 'Hello [sigh] there',
      style_instructions: 'Say the following.',
      voice: 'Kore',
      language: 'en-US',
      output_format: 'mp3',
    })
  })

  it('accepts the limits exactly: 32 000 characters of prompt, 1 000 of style instructions', () => {
    const ok = parseMediaInput('speech', { prompt: long(32_000), style_instructions: long(1000) })
    expect(ok.input).toMatchObject({ prompt: long(32_000), style_instructions: long(1000) })
  })

  it('has the 30 voices and the listed languages', () => {
    expect(SPEECH_VOICES).toHaveLength(30)
    for (const voice of SPEECH_VOICES)
      expect(parseMediaInput('speech', { prompt: 'x', voice }).input).toMatchObject({ voice })
    expect(SPEECH_LANGUAGES).toHaveLength(87)
    for (const language of SPEECH_LANGUAGES) {
      expect(parseMediaInput('speech', { prompt: 'x', language }).input).toMatchObject({ language })
    }
    for (const output_format of ['mp3', 'wav', 'ogg_opus']) {
      expect(parseMediaInput('speech', { prompt: 'x', output_format }).input).toMatchObject({ output_format })
    }
  })

  it.each([
    [{}, 'missing_field', 'input.prompt'],
    [{ prompt: '' }, 'invalid_value', 'input.prompt'],
    [{ prompt: long(32_001) }, 'invalid_value', 'input.prompt'],
    [{ prompt: 7 }, 'invalid_value', 'input.prompt'],
    [{ prompt: 'x', style_instructions: long(1001) }, 'invalid_value', 'input.style_instructions'],
    [{ prompt: 'x', voice: 'kore' }, 'invalid_value', 'input.voice'],
    [{ prompt: 'x', voice: 'Alloy' }, 'invalid_value', 'input.voice'],
    [{ prompt: 'x', language: 'en-us' }, 'invalid_value', 'input.language'],
    [{ prompt: 'x', language: 'xx-XX' }, 'invalid_value', 'input.language'],
    [{ prompt: 'x', output_format: 'flac' }, 'invalid_value', 'input.output_format'],
    [{ prompt: 'x', speed: 2 }, 'unsupported_parameter', 'input.speed'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('speech', input)).toEqual({ status: 400, code, param })
  })
})

describe('video model A input', () => {
  it('applies the defaults: 16:9, 720P, 8 s, audio on, no references', () => {
    expect(parseMediaInput('video-a', { prompt: 'x' }).input).toEqual({
      prompt: 'x',
      aspect_ratio: '16:9',
      resolution: '720P',
      duration: 8,
      generate_audio: true,
      reference_image_urls: [],
    })
  })

  it('accepts every listed value and frames', () => {
    for (const aspect_ratio of ['16:9', '9:16'])
      for (const resolution of ['720P', '1080P', '4K'])
        for (const duration of [4, 6, 8]) {
          const input = {
            prompt: long(1000),
            aspect_ratio,
            resolution,
            duration,
            generate_audio: false,
            negative_prompt: 'blur',
            first_frame_url: url,
            last_frame_url: url,
            reference_image_urls: [url, url, url],
          }
          expect(parseMediaInput('video-a', input).input).toEqual(input)
        }
  })

  it.each([
    [{}, 'missing_field', 'input.prompt'],
    [{ prompt: long(1001) }, 'invalid_value', 'input.prompt'],
    [{ prompt: 'x', aspect_ratio: '1:1' }, 'invalid_value', 'input.aspect_ratio'],
    [{ prompt: 'x', resolution: '480P' }, 'invalid_value', 'input.resolution'],
    [{ prompt: 'x', resolution: '720p' }, 'invalid_value', 'input.resolution'],
    [{ prompt: 'x', duration: 5 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: 10 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: '8' }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', generate_audio: 'yes' }, 'invalid_value', 'input.generate_audio'],
    [{ prompt: 'x', first_frame_url: 'file:///etc/passwd' }, 'invalid_value', 'input.first_frame_url'],
    [{ prompt: 'x', last_frame_url: 'not a url' }, 'invalid_value', 'input.last_frame_url'],
    [
      { prompt: 'x', reference_image_urls: [url, url, url, url] },
      'invalid_value',
      'input.reference_image_urls',
    ],
    [
      { prompt: 'x', reference_image_urls: ['ftp://x/y.png'] },
      'invalid_value',
      'input.reference_image_urls[0]',
    ],
    [{ prompt: 'x', seed: 3 }, 'unsupported_parameter', 'input.seed'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('video-a', input)).toEqual({ status: 400, code, param })
  })
})

describe('video model B input', () => {
  it('defaults to 8 s and no references, with no aspect ratio or resolution', () => {
    expect(parseMediaInput('video-b', { prompt: 'x' }).input).toEqual({
      prompt: 'x',
      duration: 8,
      reference_image_urls: [],
    })
  })

  it('accepts the seven aspect ratios, 480P and 720P, and every second from 1 to 15', () => {
    for (const aspect_ratio of ['1:1', '16:9', '9:16', '4:3', '3:4', '3:2', '2:3']) {
      expect(parseMediaInput('video-b', { prompt: 'x', aspect_ratio }).input).toMatchObject({ aspect_ratio })
    }
    for (const resolution of ['480P', '720P']) {
      expect(parseMediaInput('video-b', { prompt: 'x', resolution }).input).toMatchObject({ resolution })
    }
    for (let duration = 1; duration <= 15; duration++) {
      expect(parseMediaInput('video-b', { prompt: 'x', duration }).input).toMatchObject({ duration })
    }
  })

  it.each([
    [{ prompt: 'x', aspect_ratio: '21:9' }, 'invalid_value', 'input.aspect_ratio'],
    [{ prompt: 'x', resolution: '1080P' }, 'invalid_value', 'input.resolution'],
    [{ prompt: 'x', duration: 0 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: 16 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: 2.5 }, 'invalid_value', 'input.duration'],
    [
      { prompt: 'x', reference_image_urls: [url, url, url, url] },
      'invalid_value',
      'input.reference_image_urls',
    ],
    [{ prompt: 'x', last_frame_url: url }, 'unsupported_parameter', 'input.last_frame_url'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('video-b', input)).toEqual({ status: 400, code, param })
  })
})

describe('video model C input', () => {
  it('defaults to 16:9, 720P and 4 s', () => {
    expect(parseMediaInput('video-c', { prompt: 'x' }).input).toEqual({
      prompt: 'x',
      aspect_ratio: '16:9',
      resolution: '720P',
      duration: 4,
    })
    expect(
      parseMediaInput('video-c', { prompt: long(32_000), duration: 12, first_frame_url: url }).input,
    ).toMatchObject({
      duration: 12,
      first_frame_url: url,
    })
  })

  it.each([
    [{ prompt: long(32_001) }, 'invalid_value', 'input.prompt'],
    [{ prompt: 'x', aspect_ratio: '1:1' }, 'invalid_value', 'input.aspect_ratio'],
    [{ prompt: 'x', resolution: '4K' }, 'invalid_value', 'input.resolution'],
    [{ prompt: 'x', duration: 6 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', reference_image_urls: [] }, 'unsupported_parameter', 'input.reference_image_urls'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('video-c', input)).toEqual({ status: 400, code, param })
  })
})

describe('generic image input', () => {
  it('defaults num_images to 1 and image_urls to []', () => {
    expect(parseMediaInput('image', { prompt: 'x' }).input).toEqual({
      prompt: 'x',
      image_urls: [],
      num_images: 1,
    })
    const full = {
      prompt: 'x',
      aspect_ratio: '16:9',
      resolution: '2K',
      image_urls: [url],
      num_images: 4,
      output_format: 'webp',
    }
    expect(parseMediaInput('image', full).input).toEqual(full)
  })

  it.each([
    [{}, 'missing_field', 'input.prompt'],
    [{ prompt: 'x', aspect_ratio: 'wide' }, 'invalid_value', 'input.aspect_ratio'],
    [{ prompt: 'x', resolution: '2 K' }, 'invalid_value', 'input.resolution'],
    [{ prompt: 'x', num_images: 0 }, 'invalid_value', 'input.num_images'],
    [{ prompt: 'x', num_images: 11 }, 'invalid_value', 'input.num_images'],
    [{ prompt: 'x', output_format: 'gif' }, 'invalid_value', 'input.output_format'],
    [{ prompt: 'x', image_urls: 'https://example.com/a.png' }, 'invalid_value', 'input.image_urls'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('image', input)).toEqual({ status: 400, code, param })
  })
})

describe('generic video input', () => {
  it('takes duration as an integer or a string of seconds, and keeps model-specific fields', () => {
    expect(parseMediaInput('video', { prompt: 'x', duration: '5', first_frame_url: url }).input).toEqual({
      prompt: 'x',
      duration: 5,
      first_frame_url: url,
    })
    expect(parseMediaInput('video', { prompt: 'x', duration: 10, resolution: '1080P' }).input).toMatchObject({
      duration: 10,
    })
  })

  it.each([
    [{ prompt: 'x', duration: 'five' }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: 0 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', duration: 61 }, 'invalid_value', 'input.duration'],
    [{ prompt: 'x', resolution: 'big' }, 'invalid_value', 'input.resolution'],
  ])('refuses %j with %s at %s', (input, code, param) => {
    expect(refusal('video', input)).toEqual({ status: 400, code, param })
  })
})

describe('the request body', () => {
  it('requires model and input; webhook and function are optional', () => {
    expect(parsePredictionRequest({ model: 'mock/image', input: { prompt: 'x' } })).toEqual({
      model: 'mock/image',
      input: { prompt: 'x' },
    })
    expect(() => parsePredictionRequest({ input: {} })).toThrow(/model/)
    expect(() => parsePredictionRequest({ model: 'm', input: 'x' })).toThrow(/input/)
    expect(() => parsePredictionRequest({ model: 'm', input: {}, function: 'text' })).toThrow(/function/)
    expect(() => parsePredictionRequest([])).toThrow(/JSON object/)
  })
})

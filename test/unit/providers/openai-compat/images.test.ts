import { describe, expect, it } from 'vitest'
import {
  openAIImagesResponseSchema,
  reportedSize,
  toImageContentType,
  toImageTier,
  toOpenAIImageRequest,
  toOpenAIImageSize,
} from '../../../../src/providers/openai-compat/images-wire.ts'
import { readJsonFixture } from '../../../support/fixtures.ts'
import { thrownGatewayError } from '../../../support/errors.ts'
import type { ImageInput } from '../../../../src/domain/media.ts'

const input = (over: Partial<ImageInput> = {}): ImageInput => ({
  prompt: 'a red bicycle',
  image_urls: [],
  num_images: 1,
  ...over,
})

describe('toOpenAIImageSize', () => {
  it.each([
    ['1:1', '1024x1024'],
    ['2:2', '1024x1024'],
    ['16:9', '1536x1024'],
    ['3:2', '1536x1024'],
    ['4:3', '1536x1024'],
    ['9:16', '1024x1536'],
    ['2:3', '1024x1536'],
    ['3:4', '1024x1536'],
    [undefined, 'auto'],
    ['0:1', 'auto'],
  ])('%s → %s', (ratio, size) => {
    expect(toOpenAIImageSize(ratio)).toBe(size)
  })
})

describe('toOpenAIImageRequest', () => {
  it('maps prompt, n, size and output format, and nothing else (resolution is ignored)', () => {
    const req = toOpenAIImageRequest(
      input({ num_images: 3, aspect_ratio: '9:16', output_format: 'webp', resolution: '2K' }),
      'gpt-image-1',
    )
    expect(req).toEqual({
      model: 'gpt-image-1',
      prompt: 'a red bicycle',
      n: 3,
      size: '1024x1536',
      output_format: 'webp',
    })
  })

  it('leaves output_format out when the client gave none, and asks auto without a ratio', () => {
    expect(toOpenAIImageRequest(input(), 'gpt-image-1')).toEqual({
      model: 'gpt-image-1',
      prompt: 'a red bicycle',
      n: 1,
      size: 'auto',
    })
  })

  it('refuses reference images with a 400 naming input.image_urls', () => {
    const err = thrownGatewayError(() =>
      toOpenAIImageRequest(input({ image_urls: ['https://example.com/a.png'] }), 'gpt-image-1'),
    )
    expect(err).toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'input.image_urls' })
  })
})

describe('tiers and content types', () => {
  it('bills 1024x1024 as 1K, the 1536 sizes and an unknown size as 2K', () => {
    expect(toImageTier('1024x1024')).toBe('1K')
    expect(toImageTier('1536x1024')).toBe('2K')
    expect(toImageTier('1024x1536')).toBe('2K')
    expect(toImageTier(undefined)).toBe('2K')
  })

  it('takes the reported format first, then the asked one, then PNG', () => {
    expect(toImageContentType('jpeg', 'png')).toBe('image/jpeg')
    expect(toImageContentType(undefined, 'webp')).toBe('image/webp')
    expect(toImageContentType(null, undefined)).toBe('image/png')
    expect(toImageContentType('tiff', undefined)).toBe('image/png')
  })

  it('reads a recorded gpt-image-1 answer: two base64 images, the size it chose', () => {
    const res = openAIImagesResponseSchema.parse(readJsonFixture('openai-compat/images-b64.json'))
    expect(res.data.map((d) => Buffer.from(d.b64_json!, 'base64').toString('latin1').slice(16))).toEqual([
      'junction-image-1',
      'junction-image-2',
    ])
    expect(reportedSize(res, 'auto')).toBe('1536x1024')
    expect(toImageTier(reportedSize(res, 'auto'))).toBe('2K')
    expect(toImageContentType(res.output_format, undefined)).toBe('image/png')
  })

  it('falls back to the asked size when the answer reports none (dall-e style url answer)', () => {
    const res = openAIImagesResponseSchema.parse(readJsonFixture('openai-compat/images-url.json'))
    expect(reportedSize(res, '1024x1024')).toBe('1024x1024')
    expect(reportedSize(res, 'auto')).toBeUndefined()
  })
})

import { z } from 'zod'
import { invalidRequest } from '../../errors.ts'
import type { ImageInput } from '../../domain/media.ts'

// OpenAI's image generation (POST /v1/images/generations,
// https://platform.openai.com/docs/api-reference/images/create): the request sent, the response
// checked loosely, and the pure translation both ways. gpt-image-1 answers base64 (`b64_json`);
// older models (dall-e) may answer `url`s, which the adapter downloads.

export type OpenAIImageSize = '1024x1024' | '1536x1024' | '1024x1536' | 'auto'

export interface OpenAIImageRequest {
  model: string
  prompt: string
  n: number
  size: OpenAIImageSize
  /** png, jpeg or webp (the input schema allows only these). */
  output_format?: string
}

export const openAIImagesResponseSchema = z.looseObject({
  created: z.number().optional(),
  data: z
    .array(
      z.looseObject({
        b64_json: z.string().nullable().optional(),
        url: z.string().nullable().optional(),
      }),
    )
    .min(1),
  /** gpt-image-1 reports what it made: the size (useful when `auto` was asked) and the format. */
  size: z.string().nullable().optional(),
  output_format: z.string().nullable().optional(),
})

export type OpenAIImagesResponse = z.infer<typeof openAIImagesResponseSchema>

/**
 * gpt-image-1 makes three sizes: square 1024x1024, landscape 1536x1024, portrait 1024x1536; any
 * ratio maps to the one of its orientation. No ratio: `auto` (the model picks).
 */
export function toOpenAIImageSize(aspectRatio: string | undefined): OpenAIImageSize {
  if (aspectRatio === undefined) return 'auto'
  const [w, h] = aspectRatio.split(':').map(Number)
  if (!w || !h) return 'auto'
  if (w === h) return '1024x1024'
  return w > h ? '1536x1024' : '1024x1536'
}

/**
 * The request for a job. Mapped: prompt, n = num_images, size from aspect_ratio, output_format.
 * Ignored: `resolution`, because gpt-image-1's pixel size is fixed by its orientation and its
 * `quality` (low/medium/high) is rendering effort rather than a resolution tier, so it is left at
 * the upstream default (`auto`). `image_urls` is refused: generations take no reference images
 * (those go to /images/edits, which this adapter does not use).
 */
export function toOpenAIImageRequest(input: ImageInput, model: string): OpenAIImageRequest {
  if (input.image_urls.length > 0) {
    throw invalidRequest(
      'unsupported_parameter',
      'input.image_urls: this model generates from text only (reference images are not supported)',
      'input.image_urls',
    )
  }
  return {
    model,
    prompt: input.prompt,
    n: input.num_images,
    size: toOpenAIImageSize(input.aspect_ratio),
    ...(input.output_format ? { output_format: input.output_format } : {}),
  }
}

/**
 * The price tier of a size (price list: `1K` for 1024x1024, `2K` for the 1536 sizes). A size the
 * upstream did not report after `auto` is billed as `2K`, the dearer: never less than it can cost.
 */
export function toImageTier(size: string | null | undefined): '1K' | '2K' {
  return size === '1024x1024' ? '1K' : '2K'
}

const contentTypes: Record<string, string> = {
  png: 'image/png',
  jpeg: 'image/jpeg',
  jpg: 'image/jpeg',
  webp: 'image/webp',
}

/** The images' content type: the format the upstream reports, else the one asked, else PNG (its default). */
export function toImageContentType(reported: string | null | undefined, asked: string | undefined): string {
  for (const f of [reported, asked]) {
    const t = f ? contentTypes[f.toLowerCase()] : undefined
    if (t) return t
  }
  return 'image/png'
}

/** The size the images have: the one reported, else the one asked (unless that was `auto`). */
export function reportedSize(res: OpenAIImagesResponse, asked: OpenAIImageSize): string | undefined {
  return res.size ?? (asked === 'auto' ? undefined : asked)
}

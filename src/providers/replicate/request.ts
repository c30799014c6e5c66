import { GatewayError, invalidRequest } from '../../errors.ts'
import type { MediaJob } from '../async-media/types.ts'
import type { ReplicatePredictionRequest } from './wire.ts'
import type { VideoCInput } from '../../domain/media.ts'

// Junction's prediction input → the input fields of each Replicate model. Replicate takes the URL of
// an image input as it is and fetches it itself, so client URLs (first frames, references) are passed
// on, never downloaded here. Input names as each model's API page lists them (replicate.com/<model>/api).

/** `owner/name` → the path of an official model's predictions (POST /v1/models/{owner}/{name}/predictions). */
export function toReplicatePredictionsPath(upstreamModel: string): string {
  const parts = upstreamModel.split('/')
  if (parts.length !== 2 || parts.some((p) => !/^[\w.-]+$/.test(p))) {
    // A configuration error (a version-pinned id `owner/name:version` included), never the client's.
    throw new GatewayError('internal_error', `replicate model "${upstreamModel}" is not owner/name`)
  }
  return `/v1/models/${parts[0]}/${parts[1]}/predictions`
}

/** `720P` → `720p`: Replicate's video models spell resolutions in lower case. */
const lowerResolution = (r: string): string => r.toLowerCase()

/** Sora 2 on Replicate takes `portrait` (720x1280) or `landscape` (1280x720), not a ratio. */
export function toSoraOrientation(ratio: VideoCInput['aspect_ratio']): 'portrait' | 'landscape' {
  return ratio === '9:16' ? 'portrait' : 'landscape'
}

export function toReplicateRequest(job: MediaJob): ReplicatePredictionRequest {
  switch (job.family) {
    case 'image': {
      // FLUX-style image input (black-forest-labs/flux-schnell): prompt, aspect_ratio, num_outputs
      // (1–4 there: more is the model's 422), output_format webp|jpg|png. `resolution` is not mapped:
      // flux-schnell's size follows `megapixels`, left at its default (1), billed as the 1K tier.
      const { input } = job
      if (input.image_urls.length > 0) {
        throw invalidRequest(
          'unsupported_parameter',
          'input.image_urls: this model generates from text only',
          'input.image_urls',
        )
      }
      return {
        input: {
          prompt: input.prompt,
          num_outputs: input.num_images,
          ...(input.aspect_ratio ? { aspect_ratio: input.aspect_ratio } : {}),
          ...(input.output_format
            ? { output_format: input.output_format === 'jpeg' ? 'jpg' : input.output_format }
            : {}),
        },
      }
    }
    case 'video-b': {
      // Seedance 1 Lite (bytedance/seedance-1-lite): prompt, duration (s), resolution 480p|720p,
      // aspect_ratio, image (the first frame to animate), reference_images (1–4 subject images; the
      // model refuses them together with a first frame: its 422 reaches the client as a 400).
      const { input } = job
      return {
        input: {
          prompt: input.prompt,
          duration: input.duration,
          ...(input.resolution ? { resolution: lowerResolution(input.resolution) } : {}),
          ...(input.aspect_ratio ? { aspect_ratio: input.aspect_ratio } : {}),
          ...(input.first_frame_url ? { image: input.first_frame_url } : {}),
          ...(input.reference_image_urls.length > 0 ? { reference_images: input.reference_image_urls } : {}),
        },
      }
    }
    case 'video-c': {
      // Sora 2 (openai/sora-2): prompt, seconds, aspect_ratio portrait|landscape, input_reference (an
      // image used as the first frame). Field names from Replicate's openai/sora-2(-pro) API pages.
      // `resolution` is not sent: sora-2 renders 720p only (a `resolution` input exists on sora-2-pro);
      // 720P and 1080P cost the same in the price list, so billing the requested one is exact.
      const { input } = job
      return {
        input: {
          prompt: input.prompt,
          seconds: input.duration,
          aspect_ratio: toSoraOrientation(input.aspect_ratio),
          ...(input.first_frame_url ? { input_reference: input.first_frame_url } : {}),
        },
      }
    }
    case 'video': {
      // A generic video model configured on Replicate: the common Replicate video names.
      const { input } = job
      const firstFrame = input.first_frame_url
      return {
        input: {
          prompt: input.prompt,
          ...(input.duration !== undefined ? { duration: input.duration } : {}),
          ...(input.resolution ? { resolution: lowerResolution(input.resolution) } : {}),
          ...(input.aspect_ratio ? { aspect_ratio: input.aspect_ratio } : {}),
          ...(typeof firstFrame === 'string' ? { image: firstFrame } : {}),
        },
      }
    }
    case 'speech':
    case 'video-a':
      throw invalidRequest(
        'unsupported_parameter',
        `provider replicate does not serve ${job.family} models`,
        'model',
      )
  }
}

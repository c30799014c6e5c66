// The nouns of asynchronous media generation (predictions): the input families and their inputs, as
// schemas/predictions.ts validates them and the media adapters (providers/async-media/types.ts) take them.

/** The input rules a model follows (schemas/predictions.ts); its catalogue entry names it. */
export type MediaFamily = 'image' | 'video' | 'speech' | 'video-a' | 'video-b' | 'video-c'

/** What kind of output a family makes. */
export type MediaKind = 'image' | 'video' | 'audio'

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

/** Generic image input (docs/design/api-contract.md), defaults applied. */
export interface ImageInput {
  prompt: string
  aspect_ratio?: string
  resolution?: string
  image_urls: string[]
  num_images: number
  output_format?: string
}

/** Generic video input; `duration` in seconds. */
export interface VideoInput {
  prompt: string
  aspect_ratio?: string
  resolution?: string
  duration?: number
  [key: string]: unknown
}

export interface SpeechInput {
  prompt: string
  style_instructions: string
  voice: string
  language: string
  output_format: 'mp3' | 'wav' | 'ogg_opus'
}

/** Video model A: text, first/last frame, references. */
export interface VideoAInput {
  prompt: string
  aspect_ratio: '16:9' | '9:16'
  resolution: '720P' | '1080P' | '4K'
  duration: 4 | 6 | 8
  generate_audio: boolean
  negative_prompt?: string
  first_frame_url?: string
  last_frame_url?: string
  reference_image_urls: string[]
}

/** Video model B: text, image animation, references. */
export interface VideoBInput {
  prompt: string
  aspect_ratio?: '1:1' | '16:9' | '9:16' | '4:3' | '3:4' | '3:2' | '2:3'
  resolution?: '480P' | '720P'
  duration: number
  first_frame_url?: string
  reference_image_urls: string[]
}

/** Video model C: text with an optional reference frame. */
export interface VideoCInput {
  prompt: string
  aspect_ratio: '16:9' | '9:16'
  resolution: '720P' | '1080P'
  duration: 4 | 8 | 12
  first_frame_url?: string
}

export type MediaInput =
  | { family: 'image'; input: ImageInput }
  | { family: 'video'; input: VideoInput }
  | { family: 'speech'; input: SpeechInput }
  | { family: 'video-a'; input: VideoAInput }
  | { family: 'video-b'; input: VideoBInput }
  | { family: 'video-c'; input: VideoCInput }

import { z } from 'zod'
import { fromZodError } from '../errors.ts'
import { parseRequestBody } from './chat.ts'
import type { MediaFamily, MediaInput, MediaKind } from '../domain/media.ts'

// POST /v1/predictions: the body, and one input schema per model family (docs/design/api-contract.md: the generic
// image and video inputs, the speech model, video models A, B and C). A family's catalogue entry
// (routing/model-table.ts) says which schema a model's input follows. Every rule is checked before
// anything reaches an upstream; a violation is a 400 whose `param` is `input.<field>`.

/** Longest URL accepted in an input (image references, frames). */
const MAX_URL_LENGTH = 4096
/** Generic prompts (image, video): far above any model's own limit, it only stops absurd bodies. */
const MAX_GENERIC_PROMPT = 32_000
/** Most images one task may ask for. */
export const MAX_IMAGES_PER_TASK = 10
/** Most reference images in a generic image input. */
const MAX_IMAGE_URLS = 16
/** Longest generic video, seconds. */
const MAX_GENERIC_VIDEO_SECONDS = 60

export const SPEECH_VOICES = [
  'Achernar',
  'Achird',
  'Algenib',
  'Algieba',
  'Alnilam',
  'Aoede',
  'Autonoe',
  'Callirrhoe',
  'Charon',
  'Despina',
  'Enceladus',
  'Erinome',
  'Fenrir',
  'Gacrux',
  'Iapetus',
  'Kore',
  'Laomedeia',
  'Leda',
  'Orus',
  'Pulcherrima',
  'Puck',
  'Rasalgethi',
  'Sadachbia',
  'Sadaltager',
  'Schedar',
  'Sulafat',
  'Umbriel',
  'Vindemiatrix',
  'Zephyr',
  'Zubenelgenubi',
] as const

export const SPEECH_LANGUAGES = [
  'af-ZA', 'am-ET', 'ar-001', 'ar-EG', 'az-AZ', 'be-BY', 'bg-BG', 'bn-BD', 'ca-ES', 'ceb-PH', 'cmn-CN',
  'cmn-tw', 'cs-CZ', 'da-DK', 'de-DE', 'el-GR', 'en-AU', 'en-GB', 'en-IN', 'en-US', 'es-419', 'es-ES',
  'es-MX', 'et-EE', 'eu-ES', 'fa-IR', 'fi-FI', 'fil-PH', 'fr-CA', 'fr-FR', 'gl-ES', 'gu-IN', 'he-IL',
  'hi-IN', 'hr-HR', 'ht-HT', 'hu-HU', 'hy-AM', 'id-ID', 'is-IS', 'it-IT', 'ja-JP', 'jv-JV', 'ka-GE',
  'kn-IN', 'ko-KR', 'kok-IN', 'la-VA', 'lb-LU', 'lo-LA', 'lt-LT', 'lv-LV', 'mai-IN', 'mg-MG', 'mk-MK',
  'ml-IN', 'mn-MN', 'mr-IN', 'ms-MY', 'my-MM', 'nb-NO', 'ne-NP', 'nl-NL', 'nn-NO', 'or-IN', 'pa-IN',
  'pl-PL', 'ps-AF', 'pt-BR', 'pt-PT', 'ro-RO', 'ru-RU', 'sd-IN', 'si-LK', 'sk-SK', 'sl-SI', 'sq-AL',
  'sr-RS', 'sv-SE', 'sw-KE', 'ta-IN', 'te-IN', 'th-TH', 'tr-TR', 'uk-UA', 'ur-PK', 'vi-VN',
] as const // prettier-ignore

const prompt = (max: number) =>
  z.string().min(1, 'prompt must not be empty').max(max, `prompt must be at most ${max} characters`)

const mediaUrl = z
  .string()
  .max(MAX_URL_LENGTH)
  .refine((v) => /^https?:\/\//i.test(v) && URL.canParse(v), 'must be an http(s) URL')

const references = (max: number) => z.array(mediaUrl).max(max, `at most ${max} reference images`).default([])

/** Seconds as an integer, or as a string of digits (the generic example passes "5"). */
const seconds = z
  .union([z.number().int(), z.string().regex(/^\d{1,4}$/, 'must be whole seconds')])
  .transform(Number)
  .pipe(z.number().min(1).max(MAX_GENERIC_VIDEO_SECONDS, `at most ${MAX_GENERIC_VIDEO_SECONDS} seconds`))

const oneOf = <T extends readonly [number, ...number[]]>(values: T) =>
  z
    .number()
    .int()
    .refine((v) => (values as readonly number[]).includes(v), `must be one of ${values.join(', ')}`)
    .transform((v) => v as T[number])

export const imageInputSchema = z.strictObject({
  prompt: prompt(MAX_GENERIC_PROMPT),
  aspect_ratio: z
    .string()
    .regex(/^\d{1,2}:\d{1,2}$/, 'must be a ratio such as 1:1 or 16:9')
    .optional(),
  resolution: z
    .string()
    .regex(/^[A-Za-z0-9]{1,16}$/, 'must be a tier such as 1K or 2K')
    .optional(),
  image_urls: z.array(mediaUrl).max(MAX_IMAGE_URLS).default([]),
  num_images: z.number().int().min(1).max(MAX_IMAGES_PER_TASK).default(1),
  output_format: z.enum(['png', 'jpeg', 'webp']).optional(),
})

/** Extra fields (first-frame URLs and the like) are model-specific: kept and passed to the upstream. */
export const videoInputSchema = z.looseObject({
  prompt: prompt(MAX_GENERIC_PROMPT),
  aspect_ratio: z
    .string()
    .regex(/^\d{1,2}:\d{1,2}$/, 'must be a ratio such as 16:9')
    .optional(),
  resolution: z
    .string()
    .regex(/^\d{3,4}[Pp]$|^4K$/, 'must be a resolution such as 720P or 1080P')
    .optional(),
  duration: seconds.optional(),
})

export const speechInputSchema = z.strictObject({
  prompt: prompt(32_000),
  style_instructions: z
    .string()
    .max(1000, 'style_instructions must be at most 1000 characters')
    .default('Say the following.'),
  voice: z.enum(SPEECH_VOICES).default('Kore'),
  language: z.enum(SPEECH_LANGUAGES).default('en-US'),
  output_format: z.enum(['mp3', 'wav', 'ogg_opus']).default('mp3'),
})

export const videoAInputSchema = z.strictObject({
  prompt: prompt(1000),
  aspect_ratio: z.enum(['16:9', '9:16']).default('16:9'),
  resolution: z.enum(['720P', '1080P', '4K']).default('720P'),
  duration: oneOf([4, 6, 8] as const).default(8),
  generate_audio: z.boolean().default(true),
  negative_prompt: z.string().max(1000).optional(),
  first_frame_url: mediaUrl.optional(),
  last_frame_url: mediaUrl.optional(),
  reference_image_urls: references(3),
})

export const videoBInputSchema = z.strictObject({
  prompt: prompt(MAX_GENERIC_PROMPT),
  aspect_ratio: z.enum(['1:1', '16:9', '9:16', '4:3', '3:4', '3:2', '2:3']).optional(),
  resolution: z.enum(['480P', '720P']).optional(),
  duration: z.number().int().min(1).max(15).default(8),
  first_frame_url: mediaUrl.optional(),
  reference_image_urls: references(3),
})

export const videoCInputSchema = z.strictObject({
  prompt: prompt(32_000),
  aspect_ratio: z.enum(['16:9', '9:16']).default('16:9'),
  resolution: z.enum(['720P', '1080P']).default('720P'),
  duration: oneOf([4, 8, 12] as const).default(4),
  first_frame_url: mediaUrl.optional(),
})

const inputSchemas = {
  image: imageInputSchema,
  video: videoInputSchema,
  speech: speechInputSchema,
  'video-a': videoAInputSchema,
  'video-b': videoBInputSchema,
  'video-c': videoCInputSchema,
} as const satisfies Record<MediaFamily, z.ZodType>

/** What each family makes. */
export const familyKind: Record<MediaFamily, MediaKind> = {
  image: 'image',
  video: 'video',
  speech: 'audio',
  'video-a': 'video',
  'video-b': 'video',
  'video-c': 'video',
}

export const predictionRequestSchema = z.strictObject({
  model: z.string().min(1).max(256),
  input: z.record(z.string(), z.unknown()),
  webhook: z.string().max(MAX_URL_LENGTH).optional(),
  /** docs/design/decisions.md: optional; the model's catalogue entry decides when absent. */
  function: z.enum(['image', 'video', 'audio']).optional(),
})

export type PredictionRequest = z.output<typeof predictionRequestSchema>

export function parsePredictionRequest(body: unknown): PredictionRequest {
  return parseRequestBody(predictionRequestSchema, body)
}

/** Validates `input` by the family's rules, defaults applied; a violation names `input.<field>`. */
export function parseMediaInput(family: MediaFamily, input: unknown): MediaInput {
  const result = inputSchemas[family].safeParse(input, { reportInput: true })
  if (!result.success) {
    const issues = result.error.issues.map((i) => ({ ...i, path: ['input', ...i.path] }))
    throw fromZodError(new z.ZodError(issues))
  }
  return { family, input: result.data } as MediaInput
}

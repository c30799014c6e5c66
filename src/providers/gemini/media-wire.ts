import { z } from 'zod'
import type { Pcm } from '../async-media/audio.ts'
import { audioTokensOf } from '../async-media/usage.ts'
import type { SpeechInput, VideoAInput } from '../../domain/media.ts'
import type { BillableUsage } from '../../domain/prices.ts'

// Gemini's media generation, pure translation (no I/O; media.ts does the calls):
// - speech: `generateContent` on a TTS model with `responseModalities: ["AUDIO"]` and a prebuilt voice
//   (https://ai.google.dev/gemini-api/docs/speech-generation). The answer is one inline part of raw
//   PCM, `audio/L16;codec=pcm;rate=24000`: signed 16-bit little-endian mono samples.
// - video (Veo): `predictLongRunning` returns an operation `{name}`; `GET /v1beta/{name}` answers
//   `{done: true, response: {generateVideoResponse: {generatedSamples: [{video: {uri}}]}}}` or
//   `{done: true, error: {code, message}}` (https://ai.google.dev/gemini-api/docs/video).

export interface GeminiSpeechRequest {
  contents: { role: 'user'; parts: { text: string }[] }[]
  generationConfig: {
    responseModalities: ['AUDIO']
    speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: string } }; languageCode: string }
  }
}

/**
 * The style instructions lead the text, as Gemini's guide writes them ("Say cheerfully: …"); inline tags
 * such as [sigh] or [whispering] stay in the text, where the model reads them.
 */
export function toGeminiSpeechRequest(input: SpeechInput): GeminiSpeechRequest {
  return {
    contents: [{ role: 'user', parts: [{ text: `${input.style_instructions}\n\n${input.prompt}` }] }],
    generationConfig: {
      responseModalities: ['AUDIO'],
      speechConfig: {
        voiceConfig: { prebuiltVoiceConfig: { voiceName: input.voice } },
        languageCode: input.language,
      },
    },
  }
}

const inlineDataSchema = z.looseObject({ mimeType: z.string(), data: z.string() })

export const geminiSpeechResponseSchema = z.looseObject({
  candidates: z
    .array(
      z.looseObject({
        content: z
          .looseObject({ parts: z.array(z.looseObject({ inlineData: inlineDataSchema.optional() })) })
          .optional(),
        finishReason: z.string().optional(),
      }),
    )
    .optional(),
  promptFeedback: z.looseObject({ blockReason: z.string().optional() }).optional(),
  usageMetadata: z
    .looseObject({
      candidatesTokenCount: z.number().optional(),
      candidatesTokensDetails: z
        .array(z.looseObject({ modality: z.string(), tokenCount: z.number().optional() }))
        .optional(),
    })
    .optional(),
})
export type GeminiSpeechResponse = z.infer<typeof geminiSpeechResponseSchema>

export type SpeechOutcome =
  { ok: true; pcm: Pcm; usage: BillableUsage } | { ok: false; code: string; message: string }

/**
 * The PCM of a speech answer and what it used (the input's `characters`, the audio tokens billed), or
 * why there is none.
 */
export function fromGeminiSpeechResponse(res: GeminiSpeechResponse, characters: number): SpeechOutcome {
  const candidate = res.candidates?.[0]
  const audio = candidate?.content?.parts.find((p) => p.inlineData?.mimeType.startsWith('audio/'))?.inlineData
  if (!audio) {
    const blocked = res.promptFeedback?.blockReason
    const reason = blocked ?? candidate?.finishReason ?? 'no audio'
    const filtered = blocked !== undefined || reason === 'SAFETY' || reason === 'PROHIBITED_CONTENT'
    return {
      ok: false,
      code: filtered ? 'content_filter' : 'upstream_failed',
      message: `the upstream returned no audio (${reason})`,
    }
  }
  const rate = /rate=(\d+)/.exec(audio.mimeType)
  const pcm: Pcm = {
    data: Buffer.from(audio.data, 'base64'),
    sampleRate: rate ? Number(rate[1]) : 24_000,
    channels: 1,
  }
  const details = res.usageMetadata?.candidatesTokensDetails?.find((d) => d.modality === 'AUDIO')?.tokenCount
  // Without a reported count, the audio's own length at Gemini's rate stands in.
  const audioTokens = details ?? res.usageMetadata?.candidatesTokenCount ?? audioTokensOf(pcm)
  return { ok: true, pcm, usage: { kind: 'speech', characters, audioTokens } }
}

export interface VeoImage {
  bytesBase64Encoded: string
  mimeType: string
}

export interface VeoRequest {
  instances: {
    prompt: string
    image?: VeoImage
    lastFrame?: VeoImage
    referenceImages?: { image: VeoImage; referenceType: 'asset' }[]
  }[]
  parameters: {
    aspectRatio: string
    resolution: string
    durationSeconds: number
    negativePrompt?: string
  }
}

export interface FetchedImages {
  first?: VeoImage
  last?: VeoImage
  references: VeoImage[]
}

/**
 * Video model A's input as a Veo request. `generate_audio` is not sent: Veo 3 on the Gemini API always
 * makes sound, and the parameter exists on Vertex AI only (docs/operators/providers.md, Prediction providers).
 */
export function toVeoRequest(input: VideoAInput, images: FetchedImages): VeoRequest {
  return {
    instances: [
      {
        prompt: input.prompt,
        ...(images.first ? { image: images.first } : {}),
        ...(images.last ? { lastFrame: images.last } : {}),
        ...(images.references.length > 0
          ? {
              referenceImages: images.references.map((image) => ({ image, referenceType: 'asset' as const })),
            }
          : {}),
      },
    ],
    parameters: {
      aspectRatio: input.aspect_ratio,
      resolution: input.resolution.toLowerCase(),
      durationSeconds: input.duration,
      ...(input.negative_prompt ? { negativePrompt: input.negative_prompt } : {}),
    },
  }
}

export const veoOperationSchema = z.looseObject({
  name: z.string().min(1),
  done: z.boolean().optional(),
  error: z.looseObject({ code: z.number().optional(), message: z.string().optional() }).optional(),
  response: z
    .looseObject({
      generateVideoResponse: z
        .looseObject({
          generatedSamples: z
            .array(z.looseObject({ video: z.looseObject({ uri: z.string() }).optional() }))
            .optional(),
          raiMediaFilteredCount: z.number().optional(),
          raiMediaFilteredReasons: z.array(z.string()).optional(),
        })
        .optional(),
    })
    .optional(),
})
export type VeoOperation = z.infer<typeof veoOperationSchema>

export type VeoProgress =
  | { state: 'pending' }
  | { state: 'done'; uris: string[] }
  | { state: 'failed'; code: string; message: string }

/** Where an operation stands. */
export function readVeoOperation(op: VeoOperation): VeoProgress {
  if (!op.done) return { state: 'pending' }
  if (op.error) {
    return {
      state: 'failed',
      code: 'upstream_failed',
      message: `video generation failed: ${op.error.message ?? op.error.code ?? 'error'}`,
    }
  }
  const r = op.response?.generateVideoResponse
  const uris = (r?.generatedSamples ?? []).flatMap((s) => (s.video?.uri ? [s.video.uri] : []))
  if (uris.length > 0) return { state: 'done', uris }
  const reasons = r?.raiMediaFilteredReasons ?? []
  if (reasons.length > 0 || (r?.raiMediaFilteredCount ?? 0) > 0) {
    return {
      state: 'failed',
      code: 'content_filter',
      message: `the video was filtered by the upstream: ${reasons.join(' ') || 'no reason given'}`,
    }
  }
  return { state: 'failed', code: 'upstream_failed', message: 'the upstream finished without a video' }
}

import { invalidRequest } from '../../errors.ts'
import { encodeAudio } from '../async-media/audio.ts'
import { downloadOutput } from '../async-media/download.ts'
import { speechCharacters } from '../async-media/usage.ts'
import type { MediaAdapter, MediaCall, MediaJob, MediaStep } from '../async-media/types.ts'
import { malformedUpstream } from '../http.ts'
import { requestJsonChecked } from '../shared/upstream.ts'
import { fromGeminiError } from './errors.ts'
import {
  fromGeminiSpeechResponse,
  geminiSpeechResponseSchema,
  readVeoOperation,
  toGeminiSpeechRequest,
  toVeoRequest,
  veoOperationSchema,
  type FetchedImages,
  type VeoImage,
} from './media-wire.ts'
import type { JsonValue, VideoAInput } from '../../domain/media.ts'

// Gemini's media models as predictions: speech generation (synchronous: `submit` answers `done`, the
// PCM encoded to the asked format) and Veo video (a long-running operation: `submit` starts it, `poll`
// reads it, and the finished video is downloaded with the key). The key goes in the x-goog-api-key
// header, never in a URL. Veo's operation is not cancelled upstream: the Gemini API documents no
// cancel for it, so a cancelled task is only dropped by the gateway (docs/operators/providers.md, Prediction providers).

function keyHeader(call: MediaCall): Record<string, string> {
  return call.upstream.apiKey ? { 'x-goog-api-key': call.upstream.apiKey } : {}
}

/** An operation name as Veo gives it (`models/<model>/operations/<id>`): nothing that could leave the path. */
const OPERATION_NAME = /^[A-Za-z0-9._-]+(?:\/[A-Za-z0-9._-]+)*$/

async function speech(job: MediaJob & { family: 'speech' }, call: MediaCall): Promise<MediaStep> {
  const json = await requestJsonChecked(
    call,
    'POST',
    `${call.upstream.baseUrl}/v1beta/models/${encodeURIComponent(job.upstreamModel)}:generateContent`,
    { ...keyHeader(call), accept: 'application/json' },
    toGeminiSpeechRequest(job.input),
    fromGeminiError,
  )
  const parsed = geminiSpeechResponseSchema.safeParse(json)
  if (!parsed.success)
    throw malformedUpstream(call, 'response is not a GenerateContentResponse', parsed.error)
  const outcome = fromGeminiSpeechResponse(parsed.data, speechCharacters(job.input))
  if (!outcome.ok) return { state: 'failed', code: outcome.code, message: outcome.message }
  const audio = await encodeAudio(outcome.pcm, job.input.output_format, {
    ffmpegPath: call.media.ffmpegPath,
    signal: call.signal,
  })
  return {
    state: 'done',
    result: {
      outputs: [{ type: 'audio', contentType: audio.contentType, data: audio.data }],
      usage: outcome.usage,
    },
  }
}

/** The client's frame and reference images, downloaded under the address rules (Veo takes bytes). */
async function fetchImages(input: VideoAInput, call: MediaCall): Promise<FetchedImages> {
  const get = async (url: string): Promise<VeoImage> => {
    const got = await call.media.fetchUserMedia(url, call.signal)
    const mimeType = got.contentType.split(';')[0]?.trim().toLowerCase() ?? ''
    if (!mimeType.startsWith('image/')) {
      throw invalidRequest(
        'invalid_value',
        `an input image URL answered ${mimeType || 'no content type'}, not an image`,
      )
    }
    return { bytesBase64Encoded: got.data.toString('base64'), mimeType }
  }
  return {
    first: input.first_frame_url ? await get(input.first_frame_url) : undefined,
    last: input.last_frame_url ? await get(input.last_frame_url) : undefined,
    references: await Promise.all(input.reference_image_urls.map(get)),
  }
}

async function startVideo(job: MediaJob & { family: 'video-a' }, call: MediaCall): Promise<MediaStep> {
  const body = toVeoRequest(job.input, await fetchImages(job.input, call))
  const json = await requestJsonChecked(
    call,
    'POST',
    `${call.upstream.baseUrl}/v1beta/models/${encodeURIComponent(job.upstreamModel)}:predictLongRunning`,
    { ...keyHeader(call), accept: 'application/json' },
    body,
    fromGeminiError,
  )
  const parsed = veoOperationSchema.safeParse(json)
  if (!parsed.success || !OPERATION_NAME.test(parsed.data.name) || parsed.data.name.includes('..')) {
    throw malformedUpstream(call, 'response is not an operation', parsed.error)
  }
  return { state: 'pending', job: { operation: parsed.data.name } }
}

async function pollVideo(
  job: MediaJob & { family: 'video-a' },
  state: JsonValue,
  call: MediaCall,
): Promise<MediaStep> {
  const name =
    state !== null &&
    typeof state === 'object' &&
    !Array.isArray(state) &&
    typeof state.operation === 'string'
      ? state.operation
      : ''
  if (!OPERATION_NAME.test(name) || name.includes('..'))
    throw malformedUpstream(call, 'stored operation name is not valid')
  const json = await requestJsonChecked(
    call,
    'GET',
    `${call.upstream.baseUrl}/v1beta/${name}`,
    { ...keyHeader(call), accept: 'application/json' },
    undefined,
    fromGeminiError,
  )
  const parsed = veoOperationSchema.safeParse(json)
  if (!parsed.success) throw malformedUpstream(call, 'response is not an operation', parsed.error)
  const progress = readVeoOperation(parsed.data)
  if (progress.state === 'pending') return { state: 'pending', job: state }
  if (progress.state === 'failed') return progress
  // Downloaded as the keeper stores them; the key goes with the download only to the configured API
  // origin (async-media/download.ts).
  const outputs = progress.uris.map((uri) => ({
    type: 'video' as const,
    contentType: 'video/mp4',
    data: downloadOutput(call, uri, keyHeader(call), () => 'video/mp4'),
  }))
  return {
    state: 'done',
    result: {
      outputs,
      usage: { kind: 'video', seconds: job.input.duration, resolution: job.input.resolution },
    },
  }
}

const unsupported = (job: MediaJob) =>
  invalidRequest('unsupported_parameter', `this provider does not serve ${job.family} models`, 'model')

export function createGeminiMediaAdapter(): MediaAdapter {
  return {
    async submit(job, call) {
      if (job.family === 'speech') return speech(job, call)
      if (job.family === 'video-a') return startVideo(job, call)
      throw unsupported(job)
    },
    async poll(job, state, call) {
      if (job.family === 'video-a') return pollVideo(job, state, call)
      // Speech finishes at submit: a task that somehow polls gets a failed answer, not a hang.
      if (job.family === 'speech') {
        return {
          state: 'failed',
          code: 'upstream_failed',
          message: 'speech finishes at submit: nothing to poll',
        }
      }
      throw unsupported(job)
    },
  }
}

import { createHash } from 'node:crypto'
import { encodeAudio, type Pcm } from '../async-media/audio.ts'
import type {
  MediaAdapter,
  MediaCall,
  MediaJob,
  MediaOutput,
  MediaResult,
  MediaStep,
} from '../async-media/types.ts'
import { AUDIO_TOKENS_PER_SECOND, audioTokensOf, speechCharacters } from '../async-media/usage.ts'
import { renderTestVideo } from '../async-media/video.ts'
import { encodePng } from './png.ts'
import type { JsonValue } from '../../domain/media.ts'
import type { BillableUsage } from '../../domain/prices.ts'

// The mock provider's media models (predictions): real files without a network, for tests and demos.
// A job is "ready" a delay after submission; its state is JSON (the time it is ready), stored with the
// task, so a gateway restarted in between finishes it. Prompt directives steer it:
//   [mock:delay=<ms>]   ready after that long instead of the configured delay (0 to 600 000)
//   [mock:fail]         fails when ready (nothing billed)
//   [mock:fail=billed]  fails when ready, billed as if the upstream had charged for the work
//   [mock:reject]       refused at submission, as an upstream refuses a prompt
// Images are PNGs whose colours follow the prompt; speech is a tone per word, as long as the text
// takes to say; video is ffmpeg's test pattern at the requested length.

export interface MockMediaOptions {
  now: () => number
  /** How long a job takes unless its prompt says otherwise. */
  delayMs: number
}

const MAX_DELAY_MS = 600_000
/** Images are this many pixels on their long side. */
const IMAGE_LONG_SIDE = 256
/** Video frames on the long side (even: H.264's 4:2:0 needs even sizes). */
const VIDEO_LONG_SIDE = 160
const SAMPLE_RATE = 24_000
/** About the pace of speech: 60 ms a character, between half a second and a minute. */
const MS_PER_CHARACTER = 60
const MIN_SPEECH_MS = 500
const MAX_SPEECH_MS = 60_000
const GENERIC_VIDEO_SECONDS = 5

export function readDirectives(prompt: string, defaultDelayMs: number) {
  const delay = /\[mock:delay=(\d{1,6})\]/.exec(prompt)
  return {
    delayMs: delay ? Math.min(Number(delay[1]), MAX_DELAY_MS) : defaultDelayMs,
    fail: /\[mock:fail(?:=billed)?\]/.test(prompt),
    billed: prompt.includes('[mock:fail=billed]'),
    reject: prompt.includes('[mock:reject]'),
  }
}

/** Width and height for an aspect ratio such as `16:9` (the long side fixed, both even). */
export function frameSize(aspect: string | undefined, longSide: number): { width: number; height: number } {
  const m = /^(\d{1,2}):(\d{1,2})$/.exec(aspect ?? '')
  const w = m ? Number(m[1]) : 1
  const h = m ? Number(m[2]) : 1
  if (w <= 0 || h <= 0) return { width: longSide, height: longSide }
  const even = (v: number) => Math.max(2, 2 * Math.round(v / 2))
  return w >= h
    ? { width: longSide, height: even((longSide * h) / w) }
    : { width: even((longSide * w) / h), height: longSide }
}

function seededColour(prompt: string, index: number): [number, number, number] {
  const d = createHash('sha256').update(`${index}:${prompt}`).digest()
  return [d[0] ?? 0, d[1] ?? 0, d[2] ?? 0]
}

/** A PNG: a diagonal gradient between two colours drawn from the prompt. */
export function mockImage(prompt: string, index: number, aspect: string | undefined): Buffer {
  const { width, height } = frameSize(aspect, IMAGE_LONG_SIDE)
  const a = seededColour(prompt, index)
  const b = seededColour(prompt, index + 1000)
  return encodePng(width, height, (x, y) => {
    const t = (x / width + y / height) / 2
    return [
      Math.round(a[0] + (b[0] - a[0]) * t),
      Math.round(a[1] + (b[1] - a[1]) * t),
      Math.round(a[2] + (b[2] - a[2]) * t),
    ]
  })
}

const speechMs = (text: string): number =>
  Math.min(MAX_SPEECH_MS, Math.max(MIN_SPEECH_MS, text.length * MS_PER_CHARACTER))

/** PCM speech stand-in: a short tone for each word, pitched by the word, with gaps between. */
export function mockSpeech(text: string): Pcm {
  const ms = speechMs(text)
  const samples = Math.round((ms / 1000) * SAMPLE_RATE)
  const data = Buffer.alloc(samples * 2)
  const words = text.split(/\s+/).filter((w) => w !== '')
  const perWord = Math.floor(samples / Math.max(1, words.length))
  words.forEach((word, i) => {
    const pitch = 180 + (createHash('sha256').update(word).digest()[0] ?? 0)
    const start = i * perWord
    // The last fifth of each word's time is silence.
    const length = Math.floor(perWord * 0.8)
    for (let s = 0; s < length; s++) {
      const v = Math.sin((2 * Math.PI * pitch * s) / SAMPLE_RATE) * 8000
      data.writeInt16LE(Math.round(v), (start + s) * 2)
    }
  })
  return { data, sampleRate: SAMPLE_RATE, channels: 1 }
}

interface Produced {
  outputs: MediaOutput[]
  usage: BillableUsage
}

function videoSeconds(job: MediaJob): number {
  if (job.family === 'video') return job.input.duration ?? GENERIC_VIDEO_SECONDS
  if (job.family === 'video-a' || job.family === 'video-b' || job.family === 'video-c')
    return job.input.duration
  return GENERIC_VIDEO_SECONDS
}

/** What the job makes, and its billing units. */
async function produce(job: MediaJob, call: MediaCall): Promise<Produced> {
  switch (job.family) {
    case 'image': {
      const { prompt, num_images, aspect_ratio, resolution } = job.input
      const outputs = Array.from({ length: num_images }, (_, i) => ({
        type: 'image' as const,
        // The mock always answers PNG, whatever output_format asks.
        contentType: 'image/png',
        data: mockImage(prompt, i, aspect_ratio),
      }))
      return { outputs, usage: { kind: 'images', count: num_images, tier: resolution ?? '1K' } }
    }
    case 'speech': {
      const { prompt, output_format } = job.input
      const pcm = mockSpeech(prompt)
      const audio = await encodeAudio(pcm, output_format, {
        ffmpegPath: call.media.ffmpegPath,
        signal: call.signal,
      })
      return {
        outputs: [{ type: 'audio', contentType: audio.contentType, data: audio.data }],
        usage: { kind: 'speech', characters: speechCharacters(job.input), audioTokens: audioTokensOf(pcm) },
      }
    }
    default: {
      const seconds = videoSeconds(job)
      const size = frameSize(job.input.aspect_ratio, VIDEO_LONG_SIDE)
      const data = await renderTestVideo(
        { seconds, ...size },
        { ffmpegPath: call.media.ffmpegPath, signal: call.signal },
      )
      return {
        outputs: [{ type: 'video', contentType: 'video/mp4', data }],
        usage: { kind: 'video', seconds, resolution: job.input.resolution ?? '720P' },
      }
    }
  }
}

/** What a job would bill, without making it (a failure the "upstream" charged for). */
function billedUsage(job: MediaJob): BillableUsage {
  switch (job.family) {
    case 'image':
      return { kind: 'images', count: job.input.num_images, tier: job.input.resolution ?? '1K' }
    case 'speech':
      return {
        kind: 'speech',
        characters: speechCharacters(job.input),
        audioTokens: Math.ceil((speechMs(job.input.prompt) / 1000) * AUDIO_TOKENS_PER_SECOND),
      }
    default:
      return { kind: 'video', seconds: videoSeconds(job), resolution: job.input.resolution ?? '720P' }
  }
}

function readyAt(state: JsonValue): number {
  return state !== null &&
    typeof state === 'object' &&
    !Array.isArray(state) &&
    typeof state.readyAt === 'number'
    ? state.readyAt
    : 0
}

export function createMockMediaAdapter(options: MockMediaOptions): MediaAdapter {
  return {
    async submit(job): Promise<MediaStep> {
      const d = readDirectives(job.input.prompt, options.delayMs)
      if (d.reject) {
        return {
          state: 'failed',
          code: 'upstream_invalid_request',
          message: 'the mock refused the prompt ([mock:reject])',
        }
      }
      return { state: 'pending', job: { readyAt: options.now() + d.delayMs } }
    },
    async poll(job, state, call): Promise<MediaStep> {
      if (options.now() < readyAt(state)) return { state: 'pending', job: state }
      const d = readDirectives(job.input.prompt, options.delayMs)
      if (d.fail) {
        return {
          state: 'failed',
          code: 'mock_failure',
          message: d.billed
            ? 'the mock failed the task as asked by the prompt ([mock:fail=billed]), after billing it'
            : 'the mock failed the task as asked by the prompt ([mock:fail])',
          ...(d.billed ? { billed: billedUsage(job) } : {}),
        }
      }
      const result: MediaResult = await produce(job, call)
      return { state: 'done', result }
    },
    async cancel() {
      // Nothing runs anywhere: the job simply is never polled again.
    },
  }
}

import { scrubSecrets } from '../http.ts'
import { isOnOrigin } from '../async-media/download.ts'
import type { MediaJob } from '../async-media/types.ts'
import type { ReplicatePrediction } from './wire.ts'
import type { JsonValue, MediaKind } from '../../domain/media.ts'
import type { BillableUsage } from '../../domain/prices.ts'

// A Replicate prediction → what the task runner makes of it: still running, finished with these
// output URLs (the adapter downloads them), or failed. Pure: no I/O here.

/** The JSON state stored with the task between polls. */
export interface ReplicateJobState {
  id: string
  getUrl: string
  cancelUrl: string
}

export type ReplicateProgress =
  | { state: 'pending' }
  | { state: 'succeeded'; outputUrls: string[] }
  | { state: 'failed'; code: string; message: string }

const MAX_ERROR_MESSAGE = 300

export function readReplicatePrediction(
  p: ReplicatePrediction,
  secrets: (string | undefined)[] = [],
): ReplicateProgress {
  switch (p.status) {
    case 'starting':
    case 'processing':
      return { state: 'pending' }
    case 'succeeded': {
      const outputUrls = p.output == null ? [] : typeof p.output === 'string' ? [p.output] : p.output
      if (outputUrls.length === 0) {
        return {
          state: 'failed',
          code: 'upstream_failed',
          message: 'the upstream finished without an output',
        }
      }
      return { state: 'succeeded', outputUrls }
    }
    case 'failed':
      return { state: 'failed', code: 'upstream_failed', message: failureMessage(p.error, secrets) }
    case 'canceled':
      return { state: 'failed', code: 'cancelled', message: 'the upstream prediction was cancelled' }
  }
}

/** The model's error text, scrubbed of anything secret and cut short: it reaches the client. */
function failureMessage(error: unknown, secrets: (string | undefined)[]): string {
  const text =
    typeof error === 'string' ? error : error == null ? '' : JSON.stringify(error as JsonValue) || ''
  const clean = scrubSecrets(text.trim(), secrets)
  if (clean === '') return 'the upstream prediction failed'
  return clean.length > MAX_ERROR_MESSAGE ? `${clean.slice(0, MAX_ERROR_MESSAGE)}…` : clean
}

/**
 * Where to poll and cancel. The token is sent with both, so they must be on the configured base URL's
 * origin: Replicate's own `urls` are used when they are (always, against Replicate itself); otherwise
 * (a proxy in front, or an answer pointing elsewhere) the documented paths under the base URL.
 */
export function toReplicateState(p: ReplicatePrediction, baseUrl: string): ReplicateJobState {
  const base = baseUrl.replace(/\/+$/, '')
  const own = `${base}/v1/predictions/${encodeURIComponent(p.id)}`
  const get = p.urls?.get
  const cancel = p.urls?.cancel
  return {
    id: p.id,
    getUrl: get !== undefined && isOnOrigin(get, baseUrl) ? get : own,
    cancelUrl: cancel !== undefined && isOnOrigin(cancel, baseUrl) ? cancel : `${own}/cancel`,
  }
}

/** The stored state back, or undefined when it is not one this adapter wrote. */
export function parseReplicateState(state: JsonValue, baseUrl: string): ReplicateJobState | undefined {
  if (state === null || typeof state !== 'object' || Array.isArray(state)) return undefined
  const { id, getUrl, cancelUrl } = state
  if (typeof id !== 'string' || typeof getUrl !== 'string' || typeof cancelUrl !== 'string') return undefined
  // Checked again on the way back: a state that names another origin would carry the token there.
  if (!isOnOrigin(getUrl, baseUrl) || !isOnOrigin(cancelUrl, baseUrl)) return undefined
  return { id, getUrl, cancelUrl }
}

/**
 * What to bill, from the job's input (Replicate reports no usage of its own for these models): images
 * counted as delivered, at the 1K tier (flux-schnell's default one megapixel); video seconds as asked,
 * at the resolution asked, else the model's default (720p for Seedance 1 Lite and for Sora 2).
 */
export function replicateUsage(job: MediaJob, outputCount: number): BillableUsage {
  switch (job.family) {
    case 'image':
      return { kind: 'images', count: outputCount, tier: '1K' }
    case 'video-b':
      return { kind: 'video', seconds: job.input.duration, resolution: job.input.resolution ?? '720P' }
    case 'video-c':
      return { kind: 'video', seconds: job.input.duration, resolution: job.input.resolution }
    case 'video':
      // Seedance's default length (5 s) when the client gave none.
      return {
        kind: 'video',
        seconds: job.input.duration ?? 5,
        resolution: job.input.resolution?.toUpperCase() ?? '720P',
      }
    case 'speech':
    case 'video-a':
      // Never reached: toReplicateRequest refuses these families before anything is submitted.
      return { kind: 'video', seconds: 0, resolution: '720P' }
  }
}

export const mediaKindOf = (job: MediaJob): MediaKind => (job.family === 'image' ? 'image' : 'video')

const byExtension: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  webp: 'image/webp',
  gif: 'image/gif',
  mp4: 'video/mp4',
  webm: 'video/webm',
  mov: 'video/quicktime',
}

/**
 * An output's content type: the download's own header when it names a type of the right kind, else
 * the URL's extension (file hosts often answer application/octet-stream), else the kind's usual one.
 */
export function outputContentType(kind: MediaKind, url: string, header: string | undefined): string {
  const fromHeader = header?.split(';')[0]?.trim().toLowerCase()
  if (fromHeader?.startsWith(`${kind}/`)) return fromHeader
  let ext = ''
  try {
    ext = new URL(url).pathname.split('.').pop()?.toLowerCase() ?? ''
  } catch {
    // Not a URL: no extension.
  }
  const fromExt = Object.hasOwn(byExtension, ext) ? byExtension[ext] : undefined
  if (fromExt?.startsWith(`${kind}/`)) return fromExt
  return kind === 'image' ? 'image/png' : kind === 'video' ? 'video/mp4' : 'audio/mpeg'
}

import { downloadOutput } from '../async-media/download.ts'
import type { MediaAdapter, MediaCall, MediaOutput } from '../async-media/types.ts'
import { malformedUpstream } from '../http.ts'
import { invalidRequest } from '../../errors.ts'
import { postJsonChecked } from '../shared/upstream.ts'
import { fromOpenAIError } from './errors.ts'
import {
  openAIImagesResponseSchema,
  reportedSize,
  toImageContentType,
  toImageTier,
  toOpenAIImageRequest,
} from './images-wire.ts'

// OpenAI image generation as a prediction: the upstream is synchronous, so `submit` answers `done`
// at once and `poll` is never called. Upstream errors are mapped as for chat (a content-policy 400
// becomes a 400 GatewayError, which the task runner records as a failed task).

function authHeaders(call: MediaCall): Record<string, string> {
  return call.upstream.apiKey ? { authorization: `Bearer ${call.upstream.apiKey}` } : {}
}

/** Decoded length of base64 text, without decoding it (padding and whitespace excluded). */
function base64Length(b64: string): number {
  // Copied without whitespace only when it has some: the text can be hundreds of megabytes.
  const clean = /\s/.test(b64) ? b64.replace(/\s+/g, '') : b64
  const padding = clean.endsWith('==') ? 2 : clean.endsWith('=') ? 1 : 0
  return Math.floor((clean.length * 3) / 4) - padding
}

export function createOpenAIImagesAdapter(): MediaAdapter {
  return {
    async submit(job, call) {
      if (job.family !== 'image') {
        throw invalidRequest(
          'unsupported_parameter',
          `this provider does not serve ${job.family} models`,
          'model',
        )
      }
      const body = toOpenAIImageRequest(job.input, job.upstreamModel)
      const json = await postJsonChecked(
        call,
        `${call.upstream.baseUrl}/images/generations`,
        { ...authHeaders(call), accept: 'application/json' },
        body,
        fromOpenAIError,
      )
      const parsed = openAIImagesResponseSchema.safeParse(json)
      if (!parsed.success) throw malformedUpstream(call, 'response is not an images list', parsed.error)
      const contentType = toImageContentType(parsed.data.output_format, body.output_format)
      const limit = call.media.maxOutputBytes
      const outputs: MediaOutput[] = []
      for (const item of parsed.data.data) {
        if (item.b64_json) {
          if (base64Length(item.b64_json) > limit)
            throw malformedUpstream(call, `output larger than ${limit} bytes`)
          // Decoded once, now, and stored from this buffer as it is (no further copy), so the
          // answer's text (4/3 of the bytes, on the JS heap) can go at once. Decoding slices while
          // storing keeps that text alive longer and measured no better: the JSON answer, read and
          // parsed whole, is what costs the memory here, and it cannot be streamed.
          outputs.push({ type: 'image', contentType, data: Buffer.from(item.b64_json, 'base64') })
        } else if (item.url) {
          const typeOf = (header: string | undefined): string => {
            const type = header?.split(';')[0]?.trim().toLowerCase()
            return type?.startsWith('image/') ? type : contentType
          }
          outputs.push({
            type: 'image',
            contentType,
            data: downloadOutput(call, item.url, authHeaders(call), typeOf),
          })
        } else {
          throw malformedUpstream(call, 'an image has neither b64_json nor url')
        }
      }
      const tier = toImageTier(reportedSize(parsed.data, body.size))
      return { state: 'done', result: { outputs, usage: { kind: 'images', count: outputs.length, tier } } }
    },

    // Never needed (submit is final); a task that somehow polls gets a failed answer, not a hang.
    poll() {
      return Promise.resolve({
        state: 'failed',
        code: 'upstream_failed',
        message: 'image generation finishes at submit: there is nothing to poll',
      })
    },
  }
}

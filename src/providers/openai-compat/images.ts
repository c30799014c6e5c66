import { downloadOutput } from '../async-media/download.ts'
import { base64Length, base64Source } from '../async-media/sources.ts'
import type { MediaAdapter, MediaCall, MediaOutput } from '../async-media/types.ts'
import { malformedUpstream, readJson } from '../http.ts'
import { invalidRequest } from '../../errors.ts'
import { postChecked } from '../shared/upstream.ts'
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
      const res = await postChecked(
        call,
        `${call.upstream.baseUrl}/images/generations`,
        { ...authHeaders(call), accept: 'application/json' },
        body,
        fromOpenAIError,
      )
      const parsed = openAIImagesResponseSchema.safeParse(await readJson(call, res.body))
      if (!parsed.success) throw malformedUpstream(call, 'response is not an images list', parsed.error)
      const contentType = toImageContentType(parsed.data.output_format, body.output_format)
      const limit = call.media.maxOutputBytes
      const outputs: MediaOutput[] = []
      for (const item of parsed.data.data) {
        if (item.b64_json) {
          if (base64Length(item.b64_json) > limit)
            throw malformedUpstream(call, `output larger than ${limit} bytes`)
          // Decoded slice by slice as it is stored: the answer's text is in memory already, its
          // decoded bytes need not be too.
          outputs.push({ type: 'image', contentType, data: base64Source(item.b64_json) })
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

import { downloadOutput } from '../async-media/download.ts'
import type { MediaAdapter, MediaCall, MediaJob, MediaStep } from '../async-media/types.ts'
import { malformedUpstream } from '../http.ts'
import { requestJsonChecked } from '../shared/upstream.ts'
import { fromReplicateError } from './errors.ts'
import { toReplicatePredictionsPath, toReplicateRequest } from './request.ts'
import {
  mediaKindOf,
  outputContentType,
  parseReplicateState,
  readReplicatePrediction,
  replicateUsage,
  toReplicateState,
  type ReplicateJobState,
} from './response.ts'
import { replicatePredictionSchema, type ReplicatePrediction } from './wire.ts'
import type { JsonValue } from '../../domain/media.ts'

// Replicate predictions (https://replicate.com/docs/reference/http): create with POST, poll with GET
// on the prediction's `urls.get`, cancel with POST on `urls.cancel`; each output URL is downloaded as
// the output keeper stores it (async-media/download.ts).
// Asynchronous on purpose: no `Prefer: wait`, the task runner polls.

function authHeaders(call: MediaCall): Record<string, string> {
  return call.upstream.apiKey ? { authorization: `Bearer ${call.upstream.apiKey}` } : {}
}

function readPrediction(call: MediaCall, json: unknown): ReplicatePrediction {
  const parsed = replicatePredictionSchema.safeParse(json)
  if (!parsed.success) throw malformedUpstream(call, 'response is not a prediction', parsed.error)
  return parsed.data
}

function storedState(call: MediaCall, state: JsonValue): ReplicateJobState {
  const s = parseReplicateState(state, call.upstream.baseUrl)
  if (!s) throw malformedUpstream(call, 'the stored prediction state is not one this adapter wrote')
  return s
}

/** A prediction → the runner's step: once it has succeeded, its outputs to download (by the keeper). */
async function settle(
  job: MediaJob,
  prediction: ReplicatePrediction,
  state: ReplicateJobState,
  call: MediaCall,
): Promise<MediaStep> {
  const progress = readReplicatePrediction(prediction, [call.upstream.apiKey])
  if (progress.state === 'pending') return { state: 'pending', job: { ...state } }
  if (progress.state === 'failed') return progress
  const kind = mediaKindOf(job)
  const outputs = progress.outputUrls.map((url) => ({
    type: kind,
    contentType: outputContentType(kind, url, undefined),
    data: downloadOutput(call, url, authHeaders(call), (header) => outputContentType(kind, url, header)),
  }))
  return { state: 'done', result: { outputs, usage: replicateUsage(job, outputs.length) } }
}

export function createReplicateAdapter(): MediaAdapter {
  return {
    async submit(job, call) {
      const body = toReplicateRequest(job)
      const url = `${call.upstream.baseUrl.replace(/\/+$/, '')}${toReplicatePredictionsPath(job.upstreamModel)}`
      const json = await requestJsonChecked(
        call,
        'POST',
        url,
        { ...authHeaders(call), accept: 'application/json' },
        body,
        fromReplicateError,
      )
      const prediction = readPrediction(call, json)
      return settle(job, prediction, toReplicateState(prediction, call.upstream.baseUrl), call)
    },

    async poll(job, state, call) {
      const s = storedState(call, state)
      const json = await requestJsonChecked(
        call,
        'GET',
        s.getUrl,
        { ...authHeaders(call), accept: 'application/json' },
        undefined,
        fromReplicateError,
      )
      return settle(job, readPrediction(call, json), s, call)
    },

    async cancel(_job, state, call) {
      const s = storedState(call, state)
      // The answer is the prediction (now `canceled`, or already finished): read and let go.
      await requestJsonChecked(
        call,
        'POST',
        s.cancelUrl,
        { ...authHeaders(call), accept: 'application/json' },
        undefined,
        fromReplicateError,
      )
    },
  }
}

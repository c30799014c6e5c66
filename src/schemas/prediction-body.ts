import { fromPpm, toUsd } from '../billing/money.ts'
import type { GenerationRecord } from '../domain/records.ts'
import type { TaskRecord } from '../domain/tasks.ts'

// The prediction body of `GET /v1/predictions/{id}` (docs/design/api-contract.md's Prediction task, docs/design/decisions.md's
// Predictions), which is also the webhook's body: a pure function of the task, its generation record
// and the URL of each output.

export interface PredictionBody {
  code: '0'
  data: {
    task_id: string
    task_status: TaskRecord['status']
    output?: (
      { type: 'image'; image: string } | { type: 'video'; video: string } | { type: 'audio'; audio: string }
    )[]
    error?: { code: string; message: string }
  }
  usage?: { upstream_cost: number; discount: number; discount_percent: number; cost: number }
  request_id: string
}

export function toPredictionBody(
  task: TaskRecord,
  record: GenerationRecord | null,
  urlOf: (outputId: string) => string,
  requestId: string,
): PredictionBody {
  const data: PredictionBody['data'] = { task_id: task.id, task_status: task.status }
  if (task.status === 'success') {
    data.output = task.outputs.map((o) => {
      const url = urlOf(o.id)
      return o.type === 'image'
        ? { type: 'image', image: url }
        : o.type === 'video'
          ? { type: 'video', video: url }
          : { type: 'audio', audio: url }
    })
  }
  if (task.error) data.error = { code: task.error.code, message: task.error.message }
  const body: PredictionBody = { code: '0', data, request_id: requestId }
  // docs/design/decisions.md: usage is omitted while processing. A task that ended unbilled shows zeros.
  if (task.status !== 'processing') {
    body.usage = record
      ? {
          upstream_cost: toUsd(record.upstreamCost),
          discount: toUsd(record.discount),
          discount_percent: fromPpm(record.discountPpm),
          cost: toUsd(record.cost),
        }
      : { upstream_cost: 0, discount: 0, discount_percent: 0, cost: 0 }
  }
  return body
}

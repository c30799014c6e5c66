import { z } from 'zod'

// Replicate's HTTP API (https://replicate.com/docs/reference/http): what is sent to create a
// prediction, and the prediction object that comes back from create, get and cancel. Checked
// loosely: fields Junction does not read (logs, metrics, timestamps, …) are kept as they are.

/** `POST /v1/models/{owner}/{name}/predictions` body: the model's own input fields. */
export interface ReplicatePredictionRequest {
  input: Record<string, string | number | boolean | string[]>
}

/** `starting` and `processing` are still running; the other three are final. */
export const replicateStatusSchema = z.enum(['starting', 'processing', 'succeeded', 'failed', 'canceled'])

export type ReplicateStatus = z.infer<typeof replicateStatusSchema>

export const replicatePredictionSchema = z.looseObject({
  id: z.string().min(1),
  status: replicateStatusSchema,
  /** A file output is a URL; a model with several outputs (flux-schnell) answers an array of them. */
  output: z
    .union([z.string(), z.array(z.string())])
    .nullable()
    .optional(),
  error: z.unknown().optional(),
  urls: z
    .looseObject({
      get: z.string().optional(),
      cancel: z.string().optional(),
    })
    .optional(),
})

export type ReplicatePrediction = z.infer<typeof replicatePredictionSchema>

/** Replicate's error answers are problem details (RFC 7807): `{title, detail, status}`. */
export const replicateErrorBodySchema = z.looseObject({
  title: z.string().optional(),
  detail: z.string().optional(),
  status: z.number().optional(),
})

import type { Money } from './money.ts'

// A generation's record: what was asked, which upstreams were tried, what was used and charged.

export type CostSource = 'upstream' | 'estimate'

export interface GenerationUsage {
  prompt_tokens: number
  completion_tokens: number
  total_tokens: number
  prompt_tokens_details: {
    cached_tokens: number
    cache_write_tokens: number
    audio_tokens: number
    video_tokens: number
  }
  completion_tokens_details: { reasoning_tokens: number; image_tokens: number; audio_tokens: number }
}

/** One upstream call made for a generation (the answering one is the last). */
export interface AttemptRecord {
  /** The configured provider (`openai`, …) and the deployment id within the model. */
  provider: string
  deployment: string
  /** The model slug it was a deployment of (differs from the record's model for a fallback). */
  model: string
  /** The upstream's HTTP status; null when none came (connection refused, timeout). */
  status: number | null
  /** `ok`, or the gateway error code the failure mapped to. */
  outcome: string
  /** Unix ms when the call started. */
  startedAt: number
  durationMs: number
}

export interface GenerationRecord {
  generationId: string
  accountId: string
  api: string
  model: string
  provider: string
  createdAt: number
  generationTimeMs: number
  latencyMs: number
  streamed: boolean
  finishReason: string | null
  cancelled: boolean
  costSource: CostSource
  usage: GenerationUsage
  upstreamCost: Money
  discountPpm: number
  discount: Money
  cost: Money
  /**
   * What the upstream's usage priced beyond the charge's bound (cost after discount, not charged), and
   * the tokens it stands for; absent when nothing was left unbilled.
   */
  unbilledOverage?: { usd: Money; tokens: number }
  /** Every upstream call, in order; absent on records written before attempts were kept. */
  attempts?: AttemptRecord[]
  /**
   * The hash of the API key that made it (never the key). A settle given none takes its reservation's
   * (`reserveForKey`); absent when neither named one.
   */
  keyHash?: string
}

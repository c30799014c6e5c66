import type { GenerationRecord } from '../domain/records.ts'
import { fromPpm, toUsd } from '../billing/money.ts'

/** A generation record as `GET /v1/generation` shows it (docs/design/api-contract.md + docs/design/decisions.md fields). */
export function toGenerationBody(r: GenerationRecord) {
  return {
    api: r.api,
    generationId: r.generationId,
    model: r.model,
    provider: r.provider,
    createAt: new Date(r.createdAt).toISOString(),
    generationTime: r.generationTimeMs,
    latency: r.latencyMs,
    usage: {
      ...r.usage,
      upstream_cost: toUsd(r.upstreamCost),
      discount: toUsd(r.discount),
      discount_percent: fromPpm(r.discountPpm),
      cost: toUsd(r.cost),
    },
    streamed: r.streamed,
    finishReason: r.finishReason,
    cancelled: r.cancelled,
    cost_source: r.costSource,
    /** The hash of the API key that made it (as `GET /v1/keys/{hash}` names it); never the key. */
    key_hash: r.keyHash ?? null,
    /**
     * What the upstream's usage priced beyond what the request could be charged (its hold plus the
     * account's overdraft): not in `cost`, so `cost = upstream_cost - discount - unbilled_overage.usd`.
     */
    unbilled_overage: {
      usd: toUsd(r.unbilledOverage?.usd ?? 0n),
      tokens: r.unbilledOverage?.tokens ?? 0,
    },
    /**
     * Every upstream call made for it (retries, fallbacks), the answering one last; a prediction's are
     * its submits (the accepting one last of them), then the polls that failed.
     */
    attempts: (r.attempts ?? []).map((a) => ({
      provider: a.provider,
      deployment: a.deployment,
      model: a.model,
      status: a.status,
      outcome: a.outcome,
      startedAt: new Date(a.startedAt).toISOString(),
      durationMs: a.durationMs,
    })),
  }
}

import type { Logger } from 'pino'
import type { Config, ResolvedModel } from '../config.ts'
import { GatewayError } from '../errors.ts'
import type { Usage } from '../providers/types.ts'
import type {
  Account,
  CostSource,
  GenerationRecord,
  GenerationUsage,
  RateCheck,
  RateDecision,
  Reservation,
  Store,
} from '../store/types.ts'
import { applyPpm, type Money } from './money.ts'
import { priceChatUsage, priceEmbeddingUsage } from './prices.ts'
import type { TokenCounter } from './tokens.ts'

// Admission (rate limits, credit reservation) before a request reaches an upstream, and exactly one
// priced generation record plus the ledger settlement when it ends.

export interface MeteringDeps {
  store: Store
  config: Config
  now: () => number
  log: Logger
  countTokens: TokenCounter
}

export interface BeginOptions {
  account: Account
  model: ResolvedModel
  /** The route the request came in on, e.g. `/v1/chat/completions`. */
  api: string
  generationId: string
  streamed: boolean
  /** Upper bound of the prompt tokens (bytes of the prompt). */
  promptTokenBound: number
  /** Upper bound of the output tokens (0 for embeddings). */
  outputTokenBound: number
  /** What the tokens-per-minute limit counts before the answer is known. */
  tokenEstimate: number
}

export interface EstimateInput {
  prompt: string
  completion: string
}

export interface Outcome {
  /** Usage as the upstream reported it; absent when it reported none (cut stream, cancelled). */
  usage?: Usage
  /** The upstream produced output (an answer, or at least one chunk). */
  produced: boolean
  /** The client went away before the answer ended. */
  cancelled: boolean
  finishReason: string | null
  /** Texts to count when the usage has to be estimated; called only then. */
  estimate: () => EstimateInput
}

export interface Metered {
  /** X-RateLimit-* headers for the answer. */
  headers: Record<string, string>
  /** Marks the first byte from the upstream; later calls are ignored. */
  firstByte(): void
  /** Records and settles once (later calls return the first result). Never throws. */
  finish(outcome: Outcome): Promise<GenerationRecord | null>
}

export interface Metering {
  /** Throws 429 (rate limit) or 402 (no credits left) before anything is sent upstream. */
  begin(options: BeginOptions): Promise<Metered>
}

const MINUTE = 60_000

export function createMetering(deps: MeteringDeps): Metering {
  const { store, config, now, log } = deps

  return {
    async begin(o) {
      const start = now()
      // An account's own limit wins; one it does not set falls back to the default.
      const defaults = config.limits.defaultRateLimits
      const limits = {
        requestsPerMinute: o.account.rateLimits.requestsPerMinute ?? defaults.requestsPerMinute,
        tokensPerMinute: o.account.rateLimits.tokensPerMinute ?? defaults.tokensPerMinute,
      }
      const rpmKey = `rpm:${o.account.id}`
      const tpmKey = `tpm:${o.account.id}`
      // Both limits in one all-or-nothing step: a request refused by one counts against neither.
      const checks: RateCheck[] = []
      if (limits.requestsPerMinute !== undefined)
        checks.push({ key: rpmKey, amount: 1, limit: limits.requestsPerMinute })
      if (limits.tokensPerMinute !== undefined)
        checks.push({ key: tpmKey, amount: o.tokenEstimate, limit: limits.tokensPerMinute })
      const rates = await store.rateLimits.consume(checks, MINUTE, start)
      const rpm = limits.requestsPerMinute !== undefined ? rates.decisions[0] : undefined
      const tpm = limits.tokensPerMinute !== undefined ? rates.decisions.at(-1) : undefined
      if (rpm && !rpm.allowed) throw rateLimited('requests', rpm, start)
      if (tpm && !tpm.allowed) throw rateLimited('tokens', tpm, start)

      const discountPpm = o.account.modelDiscountsPpm[o.model.slug] ?? o.account.discountPpm
      const upper = upperBound(o)
      const reservation = await store.ledger.reserve(
        o.account.id,
        o.generationId,
        upper - applyPpm(upper, discountPpm),
        start,
        config.limits.reservationTtlMs,
      )
      if (!reservation) {
        // The rate limits keep their counts: a request refused for credits still counts as a request.
        throw new GatewayError('insufficient_credits', 'the account has no credits left')
      }

      let firstByteAt: number | undefined
      let finished: Promise<GenerationRecord | null> | undefined
      return {
        headers: rateHeaders(rpm ?? tpm, start),
        firstByte() {
          firstByteAt ??= now()
        },
        finish(outcome) {
          finished ??= settle(outcome, reservation, start, firstByteAt, discountPpm, o).catch(
            (err: unknown) => {
              log.error({ err, generationId: o.generationId }, 'could not record or settle a generation')
              return null
            },
          )
          return finished
        },
      }
    },
  }

  async function settle(
    outcome: Outcome,
    reservation: Reservation,
    start: number,
    firstByteAt: number | undefined,
    discountPpm: number,
    o: BeginOptions,
  ): Promise<GenerationRecord | null> {
    const end = now()
    const tpmKey = `tpm:${o.account.id}`
    if (!outcome.produced && !outcome.cancelled) {
      // Nothing was produced (the upstream failed first): nothing to bill or record.
      await store.ledger.release(reservation)
      await store.rateLimits.adjust(tpmKey, -o.tokenEstimate, MINUTE, end)
      return null
    }
    let costSource: CostSource = 'upstream'
    let usage: GenerationUsage
    if (outcome.usage && outcome.usage.prompt_tokens + outcome.usage.completion_tokens > 0) {
      usage = normalizeUsage(outcome.usage)
    } else {
      costSource = 'estimate'
      const texts = outcome.estimate()
      const prompt = await deps.countTokens(texts.prompt)
      const completion = texts.completion === '' ? 0 : await deps.countTokens(texts.completion)
      usage = normalizeUsage({
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
      })
    }
    const upstreamCost: Money =
      o.model.type === 'embedding'
        ? priceEmbeddingUsage(usage, o.model.price)
        : priceChatUsage(usage, o.model.price)
    const discount = applyPpm(upstreamCost, discountPpm)
    const record: GenerationRecord = {
      generationId: o.generationId,
      accountId: o.account.id,
      api: o.api,
      model: o.model.slug,
      provider: o.model.provider,
      createdAt: start,
      generationTimeMs: end - start,
      latencyMs: (firstByteAt ?? end) - start,
      streamed: o.streamed,
      finishReason: outcome.finishReason,
      cancelled: outcome.cancelled,
      costSource,
      usage,
      upstreamCost,
      discountPpm,
      discount,
      cost: upstreamCost - discount,
    }
    // The charge and the record in one step, once per generation id.
    await store.ledger.settle(reservation, record)
    await store.rateLimits.adjust(tpmKey, usage.total_tokens - o.tokenEstimate, MINUTE, end)
    return record
  }
}

/** The most the request can cost before discount: every prompt and output token at its dearest price. */
function upperBound(o: BeginOptions): Money {
  const p = o.model.price
  if (o.model.type === 'embedding') return BigInt(o.promptTokenBound) * p.embedding
  const maxIn = [p.prompt, p.cacheWrite, p.cachedPrompt, p.audioPrompt].reduce((a, b) => (b > a ? b : a))
  const maxOut = [p.completion, p.reasoning, p.audioCompletion].reduce((a, b) => (b > a ? b : a))
  return BigInt(o.promptTokenBound) * maxIn + BigInt(o.outputTokenBound) * maxOut
}

const int = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0)

export function normalizeUsage(u: Usage): GenerationUsage {
  const pd = u.prompt_tokens_details ?? {}
  const cd = u.completion_tokens_details ?? {}
  const prompt = int(u.prompt_tokens)
  const completion = int(u.completion_tokens)
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: {
      cached_tokens: int(pd.cached_tokens),
      cache_write_tokens: int(pd.cache_write_tokens),
      audio_tokens: int(pd.audio_tokens),
      video_tokens: int(pd.video_tokens),
    },
    completion_tokens_details: {
      reasoning_tokens: int(cd.reasoning_tokens),
      image_tokens: int(cd.image_tokens),
      audio_tokens: int(cd.audio_tokens),
    },
  }
}

function rateHeaders(d: RateDecision | undefined, t: number): Record<string, string> {
  if (!d) return {}
  return {
    'x-ratelimit-limit': String(d.limit),
    'x-ratelimit-remaining': String(d.remaining),
    'x-ratelimit-reset': String(Math.max(0, Math.ceil((d.resetAt - t) / 1000))),
  }
}

function rateLimited(what: 'requests' | 'tokens', d: RateDecision, t: number): GatewayError {
  const headers = rateHeaders(d, t)
  headers['retry-after'] = String(Math.max(1, Math.ceil((d.resetAt - t) / 1000)))
  return new GatewayError('rate_limit_exceeded', `rate limit of ${d.limit} ${what} per minute reached`, {
    headers,
  })
}

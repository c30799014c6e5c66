import { countTokens as defaultCount, embeddingTokenBound } from '../billing/tokens.ts'
import { GatewayError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { EmbeddingsRequest } from '../providers/types.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import type { AttemptRecord, GenerationRecord } from '../domain/records.ts'
import { allowedCandidates, answerHeaders, attemptContext, type InferenceDeps } from './chat.ts'
import { tryCandidates } from './attempts.ts'
import { beginGeneration, type PreAdmission } from './generation.ts'
import type { EmbeddingsResponse } from '../domain/chat.ts'

export interface EmbeddingsInput {
  account: Account
  /** The key the request was made with: only its allowed models are called, and its limits apply. */
  key?: ApiKeyRecord
  req: EmbeddingsRequest
  api: string
  signal: AbortSignal
  log: Logger
  /**
   * Called once the request is admitted, before any upstream call: its answer, error or not, carries
   * these; `attempts` is the generation's list of upstream calls, filled as they are made.
   */
  onAdmitted?: (
    generationId: string,
    headers: Record<string, string>,
    attempts: readonly AttemptRecord[],
  ) => void
  /** The requests-per-minute limit already counted this request (before its body was read). */
  requestCounted?: boolean
  /** The pre-body admission its route left to this one. */
  preAdmission?: PreAdmission
  onRecord?: (record: GenerationRecord | null) => void
  traceparent?: string
}

export interface EmbeddingsResult {
  generationId: string
  headers: Record<string, string>
  body: EmbeddingsResponse
}

/** An embeddings request's life: route, admit, call the deployments in order, settle once. */
export async function createEmbeddings(
  deps: InferenceDeps,
  input: EmbeddingsInput,
): Promise<EmbeddingsResult> {
  const { req, signal, log } = input
  const count = deps.countTokens ?? defaultCount
  const route = deps.router.route({ slug: req.model, type: 'embedding' })
  const candidates = allowedCandidates(route.candidates, route.model.slug, input.key).filter(
    (c) => c.provider.adapter.embed !== undefined,
  )
  const first = candidates[0]
  if (!first) {
    throw new GatewayError('unsupported_parameter', `the providers of ${req.model} have no embeddings`, {
      param: 'model',
    })
  }
  const bound = embeddingTokenBound(req)
  const generation = await beginGeneration(deps, {
    account: input.account,
    key: input.key,
    model: route.model,
    deployments: candidates.map((c) => c.deployment),
    api: input.api,
    generationId: deps.ids.generation(),
    streamed: false,
    promptTokenBound: bound,
    outputTokenBound: 0,
    tokenEstimate: Math.ceil(bound / 4),
    requestCounted: input.requestCounted,
    preAdmission: input.preAdmission,
    onRecord: input.onRecord,
  })
  input.onAdmitted?.(generation.id, generation.headers, generation.attempts)
  const estimate = async () => ({ promptTokens: await count(inputText(req)), completionTokens: 0 })
  const promptTokens = async () => (await estimate()).promptTokens
  const ctx = attemptContext(deps, generation, signal, log, promptTokens, input.traceparent)
  const { candidate, value: result } = await tryCandidates(candidates, ctx, (c, call) => {
    const embed = c.provider.adapter.embed as NonNullable<typeof c.provider.adapter.embed>
    return embed(req, call)
  })
  await generation.finishBeforeDelivery({
    deployment: candidate.deployment,
    usage: {
      prompt_tokens: result.usage.prompt_tokens,
      completion_tokens: 0,
      total_tokens: result.usage.total_tokens,
    },
    produced: true,
    cancelled: false,
    finishReason: 'stop',
    estimate,
  })
  return {
    generationId: generation.id,
    headers: answerHeaders(generation, candidate),
    body: { ...result, model: candidate.model.slug },
  }
}

function inputText(req: EmbeddingsRequest): string {
  const inputs: unknown[] = Array.isArray(req.input) ? req.input : [req.input]
  return inputs.map((i) => (typeof i === 'string' ? i : JSON.stringify(i))).join('\n')
}

import { toGatewayError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { UpstreamCall } from '../providers/types.ts'
import type { Candidate } from '../routing/router.ts'
import type { Generation } from './generation.ts'

export interface AttemptContext {
  generation: Generation
  /** The client's signal: once it fired, no other candidate is tried. */
  signal: AbortSignal
  log: Logger
  /** Prompt tokens, counted only when a cancelled request must be billed by estimate. */
  promptTokens: () => Promise<number>
}

/**
 * Tries the candidates in order until one answers. An error before any output that is retryable (the
 * upstream's fault, a timeout, a 429) moves on to the next candidate; any other error, the last
 * candidate's error, or the client leaving ends the generation (recorded as the prompt's if the client
 * left, released otherwise) and is thrown.
 */
export async function tryCandidates<T>(
  candidates: readonly Candidate[],
  ctx: AttemptContext,
  call: (c: Candidate, upstream: UpstreamCall) => Promise<T>,
): Promise<{ candidate: Candidate; value: T }> {
  for (let i = 0; ; i++) {
    const candidate = candidates[i] as Candidate
    try {
      const value = await call(candidate, {
        upstream: candidate.provider.config,
        upstreamModel: candidate.deployment.upstreamModel,
        signal: ctx.signal,
        log: ctx.log,
        dispatcher: candidate.provider.dispatcher,
        onFirstByte: ctx.generation.firstByte,
      })
      return { candidate, value }
    } catch (err) {
      const e = toGatewayError(err)
      if (i + 1 < candidates.length && e.retryable && !ctx.signal.aborted) {
        ctx.log.warn(
          { deployment: candidate.deployment.id, status: e.status, code: e.code },
          'deployment failed before answering; trying the next',
        )
        continue
      }
      if (ctx.signal.aborted) {
        // The client never sees this id (no answer goes out); the log line lets support find the record.
        ctx.log.info(
          { generationId: ctx.generation.id, deployment: candidate.deployment.id },
          'client left before the first byte: billed for the prompt',
        )
      }
      await ctx.generation.finish({
        deployment: candidate.deployment,
        produced: false,
        cancelled: ctx.signal.aborted,
        finishReason: null,
        estimate: async () => ({ promptTokens: await ctx.promptTokens(), completionTokens: 0 }),
      })
      throw err
    }
  }
}

import { countTokens as defaultCount, promptText, type TokenCounter } from '../billing/tokens.ts'
import { toGatewayError } from '../errors.ts'
import type { Logger } from '../logger.ts'
import type { ChatRequest } from '../providers/types.ts'
import type { Router } from '../routing/router.ts'

// A prompt's input tokens without generating anything (Anthropic's count_tokens): asked of the
// deployment that would answer when its upstream counts (Anthropic, Gemini), our tokenizer's estimate otherwise
// or when that call fails. Nothing is reserved or billed: no upstream charges for counting.

export interface CountTokensDeps {
  router: Router
  countTokens?: TokenCounter
}

export interface TokenCount {
  inputTokens: number
  source: 'upstream' | 'estimate'
}

export async function countPromptTokens(
  deps: CountTokensDeps,
  req: ChatRequest,
  o: { signal: AbortSignal; log: Logger; traceparent?: string },
): Promise<TokenCount> {
  // An unknown model is a 404, as on the generating routes.
  const { candidates } = deps.router.route({ slug: req.model, type: 'chat', provider: req.provider })
  const first = candidates[0]
  const count = first?.provider.adapter.countTokens
  if (first && count) {
    try {
      const inputTokens = await count(req, {
        upstream: first.provider.config,
        upstreamModel: first.deployment.upstreamModel,
        signal: o.signal,
        log: o.log,
        dispatcher: first.provider.dispatcher,
        traceparent: o.traceparent,
      })
      return { inputTokens, source: 'upstream' }
    } catch (err) {
      if (o.signal.aborted) throw err
      const e = toGatewayError(err)
      o.log.warn(
        { provider: first.deployment.provider, status: e.status, code: e.code },
        'upstream token count failed: estimated instead',
      )
    }
  }
  return { inputTokens: await (deps.countTokens ?? defaultCount)(promptText(req)), source: 'estimate' }
}

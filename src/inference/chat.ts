import {
  countTokens as defaultCount,
  createTokenMeter,
  promptTextInTurns,
  promptTokenBoundInTurns,
  type TokenCounter,
} from '../billing/tokens.ts'
import type { MeteringStats } from '../billing/metering.ts'
import type { LimitsConfig } from '../billing/config.ts'
import type { FilesConfig } from '../files/config.ts'
import type { RoutingConfig } from '../routing/config.ts'
import { UpstreamError } from '../errors.ts'
import { resolveFileReferences } from '../files/references.ts'
import type { FileStorage } from '../files/storage.ts'
import type { Ids } from '../ids.ts'
import type { Logger } from '../logger.ts'
import type { ChatRequest } from '../providers/types.ts'
import type { Health } from '../routing/health.ts'
import type { Candidate, Router } from '../routing/router.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'
import type { AttemptRecord, GenerationRecord } from '../domain/records.ts'
import { assertModelAllowed, modelAllowed } from '../auth/index.ts'
import type { Metrics } from '../metrics.ts'
import { addUpstreamEvents, carriesAnswer, upstreamEventsOf } from '../providers/shared/stream.ts'
import { tryCandidates, type AttemptContext } from './attempts.ts'
import {
  beginGeneration,
  type Generation,
  type GenerationDeps,
  type Outcome,
  type PreAdmission,
} from './generation.ts'
import type { ChatChunk, ChatCompletion, Usage } from '../domain/chat.ts'

// A chat request's life from a parsed request to an answer: resolve the model to its candidate
// deployments, inline file references, admit (429/402), call the deployments in order until one
// answers, and settle once however it ends. Routes only parse and send.

export interface InferenceDeps extends GenerationDeps {
  config: { files: FilesConfig; limits: LimitsConfig; routing: RoutingConfig }
  router: Router
  health: Health
  ids: Ids
  fileStorage: FileStorage
  countTokens?: TokenCounter
  /** Waits between retries of one deployment (tests replace it). */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>
  metrics?: Metrics
}

export interface ChatInput {
  account: Account
  /** The key the request was made with: only its allowed models are called, and its limits apply. */
  key?: ApiKeyRecord
  req: ChatRequest
  /** The route it came in on. */
  api: string
  /** Fires when the client goes away: the upstream call is aborted. */
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
  /** The pre-body admission its route left to this one: run before any file is read. */
  preAdmission?: PreAdmission
  /** Called once the generation is settled, with its record (the request's log line reads it). */
  onRecord?: (record: GenerationRecord | null) => void
  /** W3C trace context for the upstream calls. */
  traceparent?: string
  /** Sees the candidate deployments before admission: a dialect refuses what some cannot serve. */
  onRouted?: (candidates: readonly Candidate[]) => void
}

export type ChatStart =
  | { stream: false; generationId: string; headers: Record<string, string>; completion: ChatCompletion }
  | {
      stream: true
      generationId: string
      headers: Record<string, string>
      /**
       * The chunks to send, in batches (those of one upstream read together), the first already
       * received; however iteration ends, the generation is settled.
       */
      batches: AsyncIterable<ChatChunk[]>
    }

/**
 * The deployments a key may reach: 403 when the model asked for is not among its allowed models, and
 * a fallback to a model outside them is dropped (nothing is sent to a model the key may not call).
 */
export function allowedCandidates<C extends { deployment: { slug: string } }>(
  candidates: readonly C[],
  slug: string,
  key: ApiKeyRecord | undefined,
): C[] {
  if (!key?.allowedModels) return [...candidates]
  assertModelAllowed(key, slug)
  return candidates.filter((c) => modelAllowed(key, c.deployment.slug))
}

export async function startChat(deps: InferenceDeps, input: ChatInput): Promise<ChatStart> {
  const { req, signal, log } = input
  const count = deps.countTokens ?? defaultCount
  const route = deps.router.route({
    slug: req.model,
    type: 'chat',
    provider: req.provider,
    modelRouting: req.model_routing_config,
  })
  const { model } = route
  const candidates = allowedCandidates(route.candidates, model.slug, input.key)
  input.onRouted?.(candidates)
  // The caller's file ids in the messages become the files' content, inline (docs/design/decisions.md).
  const resolved = await resolveFileReferences(req, {
    accountId: input.account.id,
    files: deps.store.files,
    storage: deps.fileStorage,
    maxInlineBytes: deps.config.files.maxInlineBytesPerRequest,
    beforeReads: input.preAdmission && (() => input.preAdmission!.run()),
  })
  // Counted on the resolved request, so inlined file content is inside the bound.
  const promptBound = await promptTokenBoundInTurns(resolved)
  const clientLimit = req.max_completion_tokens ?? req.max_tokens
  const outputBound = clientLimit ?? model.maxOutputTokens ?? deps.config.limits.defaultMaxOutputTokens
  const generation = await beginGeneration(deps, {
    account: input.account,
    key: input.key,
    model,
    deployments: candidates.map((c) => c.deployment),
    api: input.api,
    generationId: deps.ids.generation(),
    streamed: req.stream === true,
    promptTokenBound: promptBound,
    outputTokenBound: outputBound,
    // Bytes/4 is the usual tokens-per-text rule of thumb; the answer corrects it afterwards.
    tokenEstimate: Math.ceil(promptBound / 4) + Math.min(outputBound, 4_096),
    requestCounted: input.requestCounted,
    preAdmission: input.preAdmission,
    onRecord: input.onRecord,
  })
  input.onAdmitted?.(generation.id, generation.headers, generation.attempts)
  // The reservation assumed this output bound: every upstream is told it, so it holds.
  const upstreamReq: ChatRequest =
    clientLimit === undefined || clientLimit === null
      ? { ...resolved, max_completion_tokens: outputBound }
      : resolved
  const promptTokens = async () => count(await promptTextInTurns(req))

  const attempt = attemptContext(deps, generation, signal, log, promptTokens, input.traceparent)
  if (!req.stream) {
    const { candidate, value: completion } = await tryCandidates(candidates, attempt, (c, call) =>
      c.provider.adapter.chat(upstreamReq, call),
    )
    const completionTokens = completion.usage?.completion_tokens
    if (typeof completionTokens === 'number' && completionTokens > outputBound) {
      // Charged at most the hold (the rest is the record's unbilled overage), and flagged.
      deps.stats.outputOverruns++
      log.warn(
        { generationId: generation.id, deployment: candidate.deployment.id, completionTokens, outputBound },
        'upstream answered past the output limit it was sent',
      )
    }
    await generation.finishBeforeDelivery({
      deployment: candidate.deployment,
      usage: completion.usage,
      produced: true,
      cancelled: false,
      finishReason: completion.choices[0]?.finish_reason ?? null,
      estimate: async () => ({
        promptTokens: await promptTokens(),
        completionTokens: await count(completionText(completion)),
      }),
    })
    return {
      stream: false,
      generationId: generation.id,
      headers: answerHeaders(generation, candidate),
      completion: { ...completion, id: generation.id, model: candidate.model.slug },
    }
  }

  // The answer is awaited up to its first chunk with output before any header is sent, so a failure
  // before the answer starts (upstream 429, 500, timeout, an error event after a 200) is the next
  // attempt's turn, or a normal HTTP error with its status: the client sees one clean stream.
  const { candidate, value: opened } = await tryCandidates(candidates, attempt, (c, call) =>
    openStream(c.provider.adapter.chatStream(upstreamReq, call)[Symbol.asyncIterator]()),
  )
  return {
    stream: true,
    generationId: generation.id,
    headers: answerHeaders(generation, candidate),
    batches: relayStream(opened.first, opened.rest, {
      generation,
      candidate,
      slug: candidate.model.slug,
      includeUsage: req.stream_options?.include_usage === true,
      signal,
      log,
      promptTokens,
      count,
      outputBound,
      stats: deps.stats,
      health: deps.health,
      metrics: deps.metrics,
    }),
  }
}

/** The answer's headers: rate limits, and which provider answered after how many calls. */
export function answerHeaders(generation: Generation, candidate: Candidate): Record<string, string> {
  return {
    ...generation.headers,
    'x-junction-provider': candidate.deployment.provider,
    'x-junction-deployment': candidate.deployment.id,
    'x-junction-attempts': String(generation.attempts.length),
  }
}

export function attemptContext(
  deps: InferenceDeps,
  generation: Generation,
  signal: AbortSignal,
  log: Logger,
  promptTokens: () => Promise<number>,
  traceparent?: string,
): AttemptContext {
  return {
    generation,
    signal,
    log,
    promptTokens,
    health: deps.health,
    routing: deps.config.routing,
    now: deps.now,
    sleep: deps.sleep,
    metrics: deps.metrics,
    traceparent,
  }
}

/** Chunks that come before the first one with output are held, at most this many. */
const MAX_HELD_CHUNKS = 64

/**
 * Reads an upstream stream up to its first batch with output (or its end), holding the chunks before
 * it (the role chunk): a failure until then rejects, and the attempt can be retried unseen. The held
 * chunks and that batch are the first batch; `rest` is the rest of the stream.
 */
async function openStream(
  it: AsyncIterator<ChatChunk[]>,
): Promise<{ first: IteratorResult<ChatChunk[]>; rest: AsyncIterator<ChatChunk[]> }> {
  const held: ChatChunk[] = []
  try {
    for (;;) {
      const next = await it.next()
      if (next.done) break
      for (const chunk of next.value) held.push(chunk)
      const events = upstreamEventsOf(next.value)
      if (events) addUpstreamEvents(held, events)
      if (next.value.some(carriesAnswer) || held.length >= MAX_HELD_CHUNKS) break
    }
  } catch (err) {
    await it.return?.().catch(() => undefined)
    throw err
  }
  const first: IteratorResult<ChatChunk[]> =
    held.length > 0 || upstreamEventsOf(held)
      ? { done: false, value: held }
      : { done: true, value: undefined }
  return { first, rest: it }
}

interface RelayContext {
  generation: Generation
  candidate: Candidate
  slug: string
  includeUsage: boolean
  signal: AbortSignal
  log: Logger
  promptTokens: () => Promise<number>
  count: TokenCounter
  /** The output limit the upstream was sent. */
  outputBound: number
  stats: MeteringStats
  /** A failure of the upstream after the stream started counts against its deployment's breaker. */
  health: Health
  metrics?: Metrics
}

/**
 * The upstream's chunks as the client gets them, batch by batch: ids become the generation id and
 * `model` the slug; usage (always requested upstream, for billing) is passed on only when the client
 * asked for it.
 * Only what an estimate needs is kept (a bounded running token tally, never the whole text). However
 * the iteration ends (done, failed, client gone), `finally` settles exactly once.
 */
export function relayStream(
  first: IteratorResult<ChatChunk[]>,
  batches: AsyncIterator<ChatChunk[]>,
  ctx: RelayContext,
): AsyncIterableIterator<ChatChunk[]> {
  const relay = relayChunks(first, batches, ctx)
  // A client that leaves before the relay is first read (while the answer's headers are being sent)
  // would leave a generator that never ran, so no `finally`: the generation is settled here instead,
  // as a cancelled one that produced its first chunk.
  const onGone = (): void => {
    void batches.return?.().catch(() => undefined)
    void ctx.generation.finish({
      deployment: ctx.candidate.deployment,
      produced: true,
      cancelled: true,
      finishReason: null,
      estimate: async () => ({
        promptTokens: await ctx.promptTokens(),
        completionTokens: first.done ? 0 : await ctx.count(first.value.map(chunkText).join('')),
      }),
    })
  }
  if (ctx.signal.aborted) onGone()
  else ctx.signal.addEventListener('abort', onGone, { once: true })
  // The relay itself once it is first read: an iterator object, not one more async generator around
  // it, which would cost every chunk another turn of promises.
  let state: 'new' | 'relaying' | 'over' = 'new'
  const over: IteratorReturnResult<undefined> = { done: true, value: undefined }
  return {
    [Symbol.asyncIterator]() {
      return this
    },
    next() {
      if (state === 'relaying') return relay.next()
      if (state === 'over') return Promise.resolve(over)
      ctx.signal.removeEventListener('abort', onGone)
      if (ctx.signal.aborted) {
        // onGone has settled it already; the relay never runs.
        state = 'over'
        return (batches.return?.() ?? Promise.resolve()).then(
          () => over,
          () => over,
        )
      }
      state = 'relaying'
      return relay.next()
    },
    return() {
      if (state === 'relaying') return relay.return(undefined)
      // Never read: a client gone is settled by onGone.
      state = 'over'
      return Promise.resolve(over)
    },
  }
}

function chunkText(chunk: ChatChunk): string {
  let text = ''
  for (const c of chunk.choices) text += (c.delta.content ?? '') + (c.delta.reasoning ?? '')
  return text
}

async function* relayChunks(
  first: IteratorResult<ChatChunk[]>,
  batches: AsyncIterator<ChatChunk[]>,
  ctx: RelayContext,
): AsyncGenerator<ChatChunk[]> {
  // The output's tokens, counted as they come (cheaply: only once they could pass the limit). Past
  // the limit the upstream ignored the limit it was sent, and the reservation no longer bounds the
  // cost: the stream is cut. Reasoning counts too: it is billed like the rest, and a stream of reasoning
  // that never ends would otherwise run on unbilled (an upstream whose reasoning falls outside
  // `max_tokens`, as DeepSeek's once did, needs a limit that leaves room for it).
  const meter = createTokenMeter(cutOffAt(ctx.outputBound), ctx.count)
  let usage: Usage | undefined
  let finishReason: string | null = null
  let produced = false

  /** Takes in one chunk: its text goes to the meter. */
  const take = (chunk: ChatChunk): void => {
    chunk.id = ctx.generation.id
    chunk.model = ctx.slug
    for (const choice of chunk.choices) {
      produced = true
      const d = choice.delta
      if (typeof d.content === 'string') meter.add(d.content)
      if (typeof d.reasoning === 'string') meter.add(d.reasoning)
      for (const t of d.tool_calls ?? []) {
        if (t.function?.name) meter.add(t.function.name)
        if (t.function?.arguments) meter.add(t.function.arguments)
      }
      if (choice.finish_reason) finishReason = choice.finish_reason
    }
    if (chunk.usage) usage = chunk.usage
  }

  let next = first
  try {
    while (!next.done) {
      const out: ChatChunk[] = []
      let overrun = false
      for (const chunk of next.value) {
        take(chunk)
        // It and the rest are not sent.
        if (meter.needsCount() && (await meter.exceeded())) {
          overrun = true
          break
        }
        // Junction asked for usage on the client's behalf: without include_usage, OpenAI sends no
        // usage field at all, so the usage chunk goes and so does `usage: null` on the others.
        if (!ctx.includeUsage && 'usage' in chunk) {
          if (chunk.usage && chunk.choices.length === 0) continue
          // Set to undefined, not deleted: serialisation leaves it out all the same, and a deleted
          // property turns the chunk into a dictionary, which JSON.stringify writes far more slowly.
          chunk.usage = undefined
        }
        out.push(chunk)
      }
      // The upstream's own events go along (a cut batch's do not: they hold what passed the limit).
      const events = overrun ? undefined : upstreamEventsOf(next.value)
      if (events) yield addUpstreamEvents(out, events)
      else if (out.length > 0) yield out
      if (overrun) {
        ctx.stats.outputOverruns++
        ctx.log.warn(
          {
            generationId: ctx.generation.id,
            deployment: ctx.candidate.deployment.id,
            outputBound: ctx.outputBound,
          },
          'upstream streamed past the output limit it was sent: cut off',
        )
        throw new UpstreamError(
          'upstream_error',
          `upstream ${ctx.candidate.provider.config.name} went past the output limit of ${ctx.outputBound} tokens; the answer was cut off`,
          { provider: ctx.candidate.provider.config.name, upstreamStatus: 200 },
        )
      }
      next = await batches.next()
    }
    // The answer is complete: charged before [DONE] leaves, or it ends with an error event instead.
    await ctx.generation.finishBeforeDelivery(outcome())
  } catch (err) {
    // The upstream failed mid-answer (not the client leaving, not the store): its deployment's fault.
    if (err instanceof UpstreamError && !ctx.signal.aborted) {
      ctx.health.failure(ctx.candidate.key)
      ctx.metrics?.upstreamErrors.inc({ provider: ctx.candidate.deployment.provider, code: err.code })
    }
    throw err
  } finally {
    // Leaving early (client gone, an error) must release the upstream too.
    if (!next.done) await batches.return?.().catch(() => undefined)
    await ctx.generation.finish(outcome())
  }

  function outcome(): Outcome {
    return {
      deployment: ctx.candidate.deployment,
      usage,
      produced,
      cancelled: ctx.signal.aborted,
      finishReason,
      estimate: async () => ({
        promptTokens: await ctx.promptTokens(),
        completionTokens: await meter.total(),
      }),
    }
  }
}

/**
 * The output tokens, as counted here, past which a stream is cut: the limit the upstream was sent, and
 * an eighth more. o200k is not every upstream's tokenizer, and a legitimate answer of exactly the limit
 * can count a little more here; its charge is capped at the hold anyway (billing/overage.ts).
 */
export function cutOffAt(outputBound: number): number {
  return outputBound + Math.ceil(outputBound / 8) + 8
}

function completionText(c: ChatCompletion): string {
  const m = c.choices[0]?.message
  if (!m) return ''
  return [m.content ?? '', m.reasoning ?? '', m.tool_calls ? JSON.stringify(m.tool_calls) : ''].join('')
}

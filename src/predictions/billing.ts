import { buildRecord, discountFor, type MeteringDeps } from '../billing/metering.ts'
import { compilePrice } from '../billing/prices.ts'
import { speechCharacters } from '../providers/async-media/usage.ts'
import type { ModelTable } from '../routing/model-table.ts'
import { closeGeneration } from '../inference/generation.ts'
import type { GenerationRecord, GenerationUsage } from '../domain/records.ts'
import type { TaskRecord } from '../domain/tasks.ts'
import type { TaskEnd } from './runner.ts'
import type { MediaInput } from '../domain/media.ts'
import type { Deployment } from '../domain/models.ts'
import type { Money } from '../domain/money.ts'
import type { BillableUsage, CompiledPrice } from '../domain/prices.ts'

// Billing of predictions, on the chat's lifecycle (inference/generation.ts): a task's price is held
// at creation (`holdGeneration`, the 402 rule), and when the task ends its reservation is replaced by
// what the upstream produced (success) or billed (a failed job the upstream charged for), or released
// (failed or cancelled, not billed) by `closeGeneration`. What is the task's own: the price bound of
// its input and its record's fields. One generation record per billed task, its id the task id:
// `GET /v1/generation?id=<task_id>`.

/** A generic video without a duration is held at this many seconds (the generic schema's maximum). */
const UNKNOWN_VIDEO_SECONDS = 60
/**
 * Speech priced per output audio token: 25 tokens a second of audio (Gemini), and speech runs well
 * under 10 characters a second at its slowest, so 3 tokens a character bounds it; plus the fixed part.
 */
const AUDIO_TOKENS_PER_CHARACTER = 3
const AUDIO_TOKENS_BASE = 250

const dearest = (prices: Record<string, Money>): Money => {
  let max = 0n
  for (const v of Object.values(prices)) if (v > max) max = v
  return max
}

/**
 * The most one task can cost before discount at `price`: every image at the dearest tier, every
 * second at the dearest resolution, speech by its characters plus its audio tokens' bound. Pure.
 */
export function taskCostBound(m: MediaInput, price: CompiledPrice): Money {
  switch (m.family) {
    case 'image':
      return BigInt(m.input.num_images) * dearest(price.imageByTier)
    case 'speech': {
      const characters = BigInt(speechCharacters(m.input))
      const byCharacters = characters * price.speechPerCharacter
      const byTokens =
        (characters * BigInt(AUDIO_TOKENS_PER_CHARACTER) + BigInt(AUDIO_TOKENS_BASE)) * price.speechAudioToken
      // A model priced both ways is charged both (prices.ts): the hold is their sum.
      return byCharacters + byTokens
    }
    case 'video':
      return BigInt(Math.ceil(m.input.duration ?? UNKNOWN_VIDEO_SECONDS)) * dearest(price.videoPerSecond)
    case 'video-a':
    case 'video-b':
    case 'video-c':
      return BigInt(Math.ceil(m.input.duration)) * dearest(price.videoPerSecond)
  }
}

/** The token fields of a task's record: speech audio tokens are output tokens; the rest has none. */
export function taskUsage(billed: BillableUsage): GenerationUsage {
  const audio = billed.kind === 'speech' ? Math.max(0, Math.floor(billed.audioTokens)) : 0
  return {
    prompt_tokens: 0,
    completion_tokens: audio,
    total_tokens: audio,
    prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, image_tokens: 0, audio_tokens: audio },
  }
}

export interface TaskBillingDeps extends MeteringDeps {
  models: ModelTable
  now: () => number
}

/** The deployment a task was priced at; a model removed from the config since bills at 0, logged. */
function deploymentOf(d: TaskBillingDeps, t: TaskRecord): Deployment {
  const found = d.models.get(t.model)?.deployments.find((x) => x.id === t.deployment)
  if (found) return found
  d.log.error({ taskId: t.id, model: t.model }, 'task model no longer configured: billed at 0')
  return {
    id: t.deployment,
    slug: t.model,
    provider: t.provider,
    upstreamModel: t.upstreamModel,
    price: compilePrice({}),
    priced: false,
    weight: 1,
  }
}

/** The generation record of a billed task. */
export async function taskRecord(
  d: TaskBillingDeps,
  t: TaskRecord,
  end: TaskEnd & { billed: BillableUsage },
) {
  const account = await d.store.accounts.get(t.accountId)
  const record: GenerationRecord = buildRecord({
    generationId: t.id,
    accountId: t.accountId,
    api: '/v1/predictions',
    slug: t.model,
    deployment: deploymentOf(d, t),
    startedAt: t.createdAt,
    endedAt: end.endedAt,
    firstByteAt: undefined,
    streamed: false,
    finishReason: t.status === 'success' ? 'stop' : 'error',
    cancelled: false,
    costSource: 'upstream',
    usage: taskUsage(end.billed),
    billable: end.billed,
    discountPpm: account ? discountFor(account, t.model) : 0,
    // Its submits (and failed polls), kept on the task by the runner as it went.
    attempts: t.attempts,
  })
  return record
}

/** Charges a task's end (or frees its hold when nothing was billed). Idempotent per task id. */
export async function settleTask(d: TaskBillingDeps, t: TaskRecord, end: TaskEnd): Promise<void> {
  const record = end.billed === null ? null : await taskRecord(d, t, { ...end, billed: end.billed })
  // A task's admission counted no tokens (0): its record's tokens are added to the per-minute count.
  await closeGeneration(d, {
    reservation: { id: t.id, accountId: t.accountId },
    record,
    tokenEstimate: 0,
    now: d.now(),
  })
}

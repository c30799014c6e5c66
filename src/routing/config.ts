import { z } from 'zod'
import { priceSchema } from '../billing/config.ts'
import type { MediaFamily } from '../domain/media.ts'
import type { ModelType } from '../domain/models.ts'
import type { PriceTable } from '../domain/prices.ts'
import { ConfigError } from '../errors.ts'
import { retrySchema, type ProvidersConfig } from '../providers/config.ts'
import type { RetryPolicy } from '../providers/types.ts'
import { timeoutMs } from '../timeout-ms.ts'

// Routing's slice of the config: retries, breakers and latency tracking (the file's `routing` block),
// and the file's models with their deployments, which the model table (model-table.ts) merges with
// the catalogue.

/** Retries, circuit breaking and latency tracking (routing/health.ts, inference/attempts.ts). */
export interface RoutingConfig {
  /** Most upstream calls one request makes, over every deployment and fallback. */
  maxAttempts: number
  /** No new attempt starts once this long has passed since the request's first attempt. */
  budgetMs: number
  /** A 429's Retry-After is waited out on the same deployment only up to this; longer moves on. */
  maxRetryAfterMs: number
  /** Defaults for every provider; a provider's own `retry` overrides them. */
  retry: RetryPolicy
  breaker: {
    /** Consecutive failures that take a deployment out of rotation. */
    failureThreshold: number
    /** How long it stays out before one probe request is let through. */
    cooldownMs: number
  }
  latency: {
    /** Weight of the newest time-to-first-byte in the moving average (0–1). */
    alpha: number
    /** A measurement older than this no longer counts: the deployment is measured again. */
    staleMs: number
  }
}

/** The input rules a media model follows when its config entry names none: its type's generic family. */
export const DEFAULT_FAMILY: Record<'image' | 'video' | 'speech', MediaFamily> = {
  image: 'image',
  video: 'video',
  speech: 'speech',
}

/** One provider serving a model, as the config file names it (prices are merged in the model table). */
export interface DeploymentConfig {
  provider: string
  upstreamModel: string
  /** Replaces the price list's table for this deployment. */
  pricing?: PriceTable
  /** Share of round-robin traffic (routing); 1 unless configured. */
  weight: number
  /** Quality score 0–100 for `primary_factor: quality` and `preference: quality`; the model's when unset. */
  quality?: number
}

/** A model of the config file, validated; the model table (routing/model-table.ts) merges it with the catalogue. */
export interface ModelConfig {
  slug: string
  type: ModelType
  /** Most output tokens one answer can have: the reservation's bound when the client sets none. */
  maxOutputTokens?: number
  /** Quality score 0–100 (routing); deployments without their own take it. */
  quality?: number
  /** How its deployments are ordered when a request does not say (`priority` by default). */
  routing?: 'priority' | 'round_robin' | 'least_latency'
  /** Image, video and speech models: the input rules their predictions follow. */
  family?: MediaFamily
  /** Other names requests may use for this model (bare vendor names such as `gpt-5`). */
  aliases: string[]
  deployments: DeploymentConfig[]
}

export const routingSchema = z
  .object({
    maxAttempts: z
      .number()
      .int()
      .min(1)
      .max(20)
      .default(4)
      .describe('Most upstream calls one request makes, over every deployment and fallback.'),
    budgetMs: timeoutMs
      .default(60_000)
      .describe("No new attempt starts once this long has passed since the request's first attempt."),
    maxRetryAfterMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .default(10_000)
      .describe(
        "A 429's Retry-After is waited out on the same deployment only up to this; a longer one moves on.",
      ),
    retry: retrySchema
      .default({})
      .describe(
        "Retry defaults for every provider (a provider's own `retry` overrides them): `attemptsPerDeployment`, `backoffMs`, `maxBackoffMs`.",
      ),
    breaker: z
      .object({
        failureThreshold: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .default(5)
          .describe('Consecutive failures that take a deployment out of rotation.'),
        cooldownMs: timeoutMs
          .default(30_000)
          .describe('How long a deployment stays out of rotation before one probe request is let through.'),
      })
      .strict()
      .prefault({})
      .describe('Circuit breaking per deployment, per instance.'),
    latency: z
      .object({
        alpha: z
          .number()
          .gt(0)
          .max(1)
          .default(0.3)
          .describe('Weight of the newest time to first byte in the moving average (0–1).'),
        staleMs: timeoutMs
          .default(300_000)
          .describe('A measurement older than this no longer counts: the deployment is measured again.'),
      })
      .strict()
      .prefault({})
      .describe('The moving average of time to first byte that `least_latency` and `speed` read.'),
  })
  .strict()
  .prefault({})
  .describe('Retries, circuit breaking and latency tracking.')

const deploymentSchema = z
  .object({
    provider: z.string().min(1).describe('The configured or built-in provider serving this deployment.'),
    upstreamModel: z
      .string()
      .min(1)
      .optional()
      .describe('The model id sent upstream; the rest of the slug when unset.'),
    pricing: priceSchema.optional().describe("Replaces the price list's table for this deployment."),
    weight: z.number().int().min(1).max(1000).default(1).describe('Share of round-robin traffic.'),
    quality: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe(
        "Quality score 0–100 for `primary_factor: quality` and `preference: quality`; the model's when unset.",
      ),
  })
  .strict()

const modelSchema = z
  .object({
    slug: z
      .string()
      .regex(/^[^/\s]+\/\S+$/, 'must have the form provider/model_name')
      .describe('The name requests use, `provider/model_name`.'),
    provider: z
      .string()
      .min(1)
      .optional()
      .describe("The provider serving the model; the slug's first segment when unset."),
    upstreamModel: z
      .string()
      .min(1)
      .optional()
      .describe('The model id sent upstream; the rest of the slug when unset.'),
    type: z
      .enum(['chat', 'embedding', 'image', 'video', 'speech'])
      .default('chat')
      .describe('What the model serves: chat and embeddings, or predictions (image, video, speech).'),
    /** Replaces the catalogue's price table for this slug. */
    pricing: priceSchema
      .optional()
      .describe("Replaces the price list's table for this slug (`{}` makes it free on purpose)."),
    maxOutputTokens: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        "Most output tokens one answer can have: the reservation's bound when the client sets none (`limits.defaultMaxOutputTokens` when unset).",
      ),
    quality: z
      .number()
      .min(0)
      .max(100)
      .optional()
      .describe('Quality score 0–100 (routing); deployments without their own take it.'),
    routing: z
      .enum(['priority', 'round_robin', 'least_latency'])
      .optional()
      .describe('How its deployments are ordered when a request does not say.'),
    /** Image, video and speech models: which input rules apply (the type's generic family by default). */
    family: z
      .enum(['image', 'video', 'speech', 'video-a', 'video-b', 'video-c'])
      .optional()
      .describe(
        "Image, video and speech models: the input rules their predictions follow (the type's generic family when unset).",
      ),
    /** Several providers serving the slug, in priority order (instead of provider/upstreamModel/pricing). */
    deployments: z
      .array(deploymentSchema)
      .min(1)
      .max(32)
      .optional()
      .describe(
        'Several providers serving the slug, in priority order (instead of `provider`, `upstreamModel`, `pricing`).',
      ),
    /** Other names requests may use (bare vendor names clients send, such as `claude-sonnet-4-5-20250929`). */
    aliases: z
      .array(
        z
          .string()
          .max(256)
          .regex(/^[^/\s]+(\/\S+)?$/, 'an alias is a name without spaces'),
      )
      .max(64)
      .default([])
      .describe('Other names requests may use for this model, such as bare vendor names (`gpt-5`).'),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (m.family !== undefined && (m.type === 'chat' || m.type === 'embedding')) {
      ctx.addIssue({ code: 'custom', path: ['family'], message: `a ${m.type} model has no input family` })
    }
    const kind =
      m.family === undefined ? undefined : m.family === 'speech' ? 'speech' : m.family.replace(/-.*/, '')
    if (kind !== undefined && m.type !== kind && m.type !== 'chat' && m.type !== 'embedding') {
      ctx.addIssue({
        code: 'custom',
        path: ['family'],
        message: `family ${m.family} is for ${kind} models, not ${m.type}`,
      })
    }
    if (m.deployments && (m.provider !== undefined || m.upstreamModel !== undefined || m.pricing)) {
      ctx.addIssue({
        code: 'custom',
        path: ['deployments'],
        message: 'give either deployments or provider/upstreamModel/pricing, not both',
      })
    }
  })

/** The config file's `models` block. */
export const modelsSchema = z
  .array(modelSchema)
  .default([])
  .describe('Models besides (or replacing) the built-in ones.')

export function resolveRouting(r: z.infer<typeof routingSchema>): RoutingConfig {
  const backoffMs = r.retry.backoffMs ?? 250
  return {
    maxAttempts: r.maxAttempts,
    budgetMs: r.budgetMs,
    maxRetryAfterMs: r.maxRetryAfterMs,
    retry: {
      attemptsPerDeployment: r.retry.attemptsPerDeployment ?? 2,
      backoffMs,
      maxBackoffMs: Math.max(backoffMs, r.retry.maxBackoffMs ?? 4_000),
    },
    breaker: r.breaker,
    latency: r.latency,
  }
}

/** The file's models, each as a list of deployments whose providers exist and are enabled. */
export function resolveModels(
  models: z.infer<typeof modelsSchema>,
  providers: ProvidersConfig,
): ModelConfig[] {
  return models.map((m, i) => {
    const slash = m.slug.indexOf('/')
    const deployments: DeploymentConfig[] = (
      m.deployments ?? [
        {
          provider: m.provider ?? m.slug.slice(0, slash),
          upstreamModel: m.upstreamModel,
          pricing: m.pricing,
          weight: 1,
        },
      ]
    ).map((d) => ({ ...d, upstreamModel: d.upstreamModel ?? m.slug.slice(slash + 1) }))
    deployments.forEach((d, j) => {
      if (!providers[d.provider]) {
        const path = m.deployments ? `models[${i}].deployments[${j}].provider` : `models[${i}].provider`
        throw new ConfigError(`${path}: unknown or disabled provider "${d.provider}"`)
      }
    })
    return {
      slug: m.slug,
      type: m.type,
      maxOutputTokens: m.maxOutputTokens,
      quality: m.quality,
      routing: m.routing,
      family: m.type === 'chat' || m.type === 'embedding' ? undefined : (m.family ?? DEFAULT_FAMILY[m.type]),
      aliases: m.aliases,
      deployments,
    }
  })
}

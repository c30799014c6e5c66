import { z } from 'zod'
import { ConfigError } from '../errors.ts'
import { timeoutMs } from '../timeout-ms.ts'

// The predictions' slice of the config: the file's `predictions` block (four variables override it).

/** Asynchronous predictions (predictions/): how tasks run, where their outputs live, how webhooks go out. */
export interface PredictionsConfig {
  /** A task still processing this long after creation fails with `timeout`. */
  maxTaskMs: number
  /** First wait between two polls of an upstream job; doubled each poll up to `maxPollIntervalMs`. */
  pollIntervalMs: number
  maxPollIntervalMs: number
  /** How long an instance holds a task (or a webhook delivery) it works on before another may take it. */
  leaseMs: number
  /** Tasks one instance works on at once. */
  concurrency: number
  /** Of those, at most this many of one account: a slow upstream of one account cannot take them all. */
  accountConcurrency: number
  /** Where generated images, videos and audio are kept. */
  outputsDir: string
  /** Outputs (bytes and their URLs) are deleted this long after the task ended. */
  outputRetentionMs: number
  /** Lifetime of a signed output URL handed out by a lookup or a webhook. */
  outputUrlTtlMs: number
  /** Largest output file accepted from an upstream. */
  maxOutputBytes: number
  /** Signs output URLs; when unset, one is generated and kept in the store (shared by every instance). */
  outputSigningKey?: string
  /** Origin put in output URLs (`https://gateway.example.com`); else the creating request's own host. */
  publicUrl?: string
  /** The mock provider's task duration, unless a prompt says `[mock:delay=<ms>]`. */
  mockDelayMs: number
  /** The ffmpeg executable that encodes speech to MP3 and Ogg Opus (and renders the mock's video). */
  ffmpegPath: string
  /** Finished tasks are deleted this long after they ended (never before their outputs). */
  taskRetentionMs: number
  webhooks: {
    /** Waits before retry n (ms): exponential with jitter applied at send time. */
    schedule: number[]
    /** Deliveries of one event at most (the first plus retries). */
    maxAttempts: number
    /** One attempt: connect, headers and body. */
    timeoutMs: number
    /** Local development and tests only: accept http:// webhook URLs. */
    allowHttp: boolean
    /** Local development and tests only: hosts exempt from the private-address check. */
    allowedHosts: string[]
    /** Deliveries one instance sends at once, and at most this many of one account. */
    concurrency: number
    accountConcurrency: number
  }
}

/** The config file's `predictions` block. */
export const predictionsSchema = z
  .object({
    maxTaskMs: timeoutMs
      .optional()
      .describe('A task still processing this long after creation fails with `timeout`.'),
    pollIntervalMs: z
      .number()
      .int()
      .min(10)
      .max(600_000)
      .optional()
      .describe(
        'First wait between two polls of an upstream job; doubled each poll up to `maxPollIntervalMs`.',
      ),
    maxPollIntervalMs: z
      .number()
      .int()
      .min(10)
      .max(3_600_000)
      .optional()
      .describe('Longest wait between two polls of an upstream job.'),
    leaseMs: z
      .number()
      .int()
      .min(1000)
      .max(3_600_000)
      .optional()
      .describe(
        'How long an instance holds a task (or a webhook delivery) it works on before another may take it.',
      ),
    concurrency: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .optional()
      .describe('Tasks one instance works on at once.'),
    accountConcurrency: z
      .number()
      .int()
      .min(1)
      .max(1000)
      .optional()
      .describe(
        'Of those, at most this many of one account; a quarter of `concurrency` (at least 1) when unset.',
      ),
    outputsDir: z.string().min(1).optional().describe('Where generated images, videos and audio are kept.'),
    outputRetentionMs: z
      .number()
      .int()
      .min(60_000)
      .optional()
      .describe('Outputs (bytes and their URLs) are deleted this long after the task ended.'),
    outputUrlTtlMs: z
      .number()
      .int()
      .min(1000)
      .max(365 * 86_400_000)
      .optional()
      .describe('Lifetime of a signed output URL handed out by a lookup or a webhook.'),
    maxOutputBytes: z
      .number()
      .int()
      .positive()
      .max(2 * 1024 ** 3)
      .optional()
      .describe('Largest output file accepted from an upstream.'),
    outputSigningKey: z
      .string()
      .min(32, 'must be at least 32 characters')
      .optional()
      .describe(
        'Signs output URLs; when unset, one is generated and kept in the store (shared by every instance).',
      ),
    publicUrl: z
      .url({ protocol: /^https?$/ })
      .optional()
      .describe(
        "Origin put in output URLs (`https://gateway.example.com`); the creating request's own host when unset.",
      ),
    mockDelayMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .optional()
      .describe('How long a mock prediction takes, unless its prompt says `[mock:delay=<ms>]`.'),
    ffmpegPath: z
      .string()
      .min(1)
      .optional()
      .describe(
        "The ffmpeg executable that encodes speech to MP3 and Ogg Opus and renders the mock's video.",
      ),
    taskRetentionMs: z
      .number()
      .int()
      .min(60_000)
      .optional()
      .describe('Finished tasks are deleted this long after they ended (never before their outputs).'),
    webhooks: z
      .object({
        schedule: z
          .array(z.number().int().min(0).max(86_400_000))
          .min(1)
          .max(50)
          .optional()
          .describe('Waits before each retry (ms), with ±20 % jitter; the last one repeats.'),
        maxAttempts: z
          .number()
          .int()
          .min(1)
          .max(100)
          .optional()
          .describe(
            "Deliveries of one event at most (the first plus retries); the schedule's length + 1 when unset.",
          ),
        timeoutMs: z
          .number()
          .int()
          .min(100)
          .max(300_000)
          .optional()
          .describe(
            'One delivery attempt: connect, headers and body; at most half of `predictions.leaseMs`.',
          ),
        allowHttp: z
          .boolean()
          .optional()
          .describe('Local development and tests only: accept `http://` webhook URLs.'),
        allowedHosts: z
          .array(z.string().min(1).max(253))
          .max(100)
          .optional()
          .describe('Local development and tests only: hosts exempt from the private-address check.'),
        concurrency: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe('Deliveries one instance sends at once.'),
        accountConcurrency: z
          .number()
          .int()
          .min(1)
          .max(1000)
          .optional()
          .describe(
            'Of those, at most this many to one account; a quarter of `concurrency` (at least 1) when unset.',
          ),
      })
      .strict()
      .default({})
      .describe('Webhook deliveries.'),
  })
  .strict()
  .default({ webhooks: {} })
  .describe('Asynchronous predictions: how tasks run, where their outputs live, how webhooks go out.')

/** The predictions settings the environment gives, over the file's. */
export type PredictionsEnv = Partial<
  Pick<PredictionsConfig, 'outputsDir' | 'outputSigningKey' | 'publicUrl' | 'mockDelayMs'>
>

const DEFAULT_WEBHOOK_SCHEDULE = [5_000, 30_000, 120_000, 600_000, 3_600_000, 10_800_000]

export function resolvePredictions(
  p: z.infer<typeof predictionsSchema>,
  env: PredictionsEnv,
): PredictionsConfig {
  const pollIntervalMs = p.pollIntervalMs ?? 1_000
  const schedule = p.webhooks.schedule ?? DEFAULT_WEBHOOK_SCHEDULE
  const leaseMs = p.leaseMs ?? 60_000
  const webhookTimeoutMs = p.webhooks.timeoutMs ?? 10_000
  // A lease must outlast the work done under it, or another instance repeats a delivery in flight.
  if (webhookTimeoutMs * 2 > leaseMs) {
    throw new ConfigError(
      `predictions.webhooks.timeoutMs: ${webhookTimeoutMs} ms must be at most half of predictions.leaseMs (${leaseMs} ms)`,
    )
  }
  const concurrency = p.concurrency ?? 16
  const webhookConcurrency = p.webhooks.concurrency ?? 16
  return {
    maxTaskMs: p.maxTaskMs ?? 30 * 60_000,
    pollIntervalMs,
    maxPollIntervalMs: Math.max(pollIntervalMs, p.maxPollIntervalMs ?? 30_000),
    leaseMs,
    concurrency,
    accountConcurrency: Math.min(concurrency, p.accountConcurrency ?? fairShare(concurrency)),
    outputsDir: env.outputsDir ?? p.outputsDir ?? './data/outputs',
    outputRetentionMs: p.outputRetentionMs ?? 7 * 86_400_000,
    outputUrlTtlMs: p.outputUrlTtlMs ?? 86_400_000,
    maxOutputBytes: p.maxOutputBytes ?? 512 * 1024 ** 2,
    outputSigningKey: env.outputSigningKey ?? p.outputSigningKey,
    publicUrl: (env.publicUrl ?? p.publicUrl)?.replace(/\/+$/, ''),
    mockDelayMs: env.mockDelayMs ?? p.mockDelayMs ?? 3_000,
    ffmpegPath: p.ffmpegPath ?? 'ffmpeg',
    taskRetentionMs: Math.max(p.taskRetentionMs ?? 30 * 86_400_000, p.outputRetentionMs ?? 7 * 86_400_000),
    webhooks: {
      schedule,
      maxAttempts: p.webhooks.maxAttempts ?? schedule.length + 1,
      timeoutMs: webhookTimeoutMs,
      allowHttp: p.webhooks.allowHttp ?? false,
      allowedHosts: p.webhooks.allowedHosts ?? [],
      concurrency: webhookConcurrency,
      accountConcurrency: Math.min(
        webhookConcurrency,
        p.webhooks.accountConcurrency ?? fairShare(webhookConcurrency),
      ),
    },
  }
}

/** One account's default share of an instance's task or webhook workers: a quarter, at least one. */
const fairShare = (workers: number): number => Math.max(1, Math.floor(workers / 4))

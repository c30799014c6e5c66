import { z } from 'zod'
import type { ProviderKind } from '../domain/models.ts'
import { ConfigError } from '../errors.ts'
import { timeoutMs } from '../timeout-ms.ts'
import { builtinProviders, type BuiltinProvider } from './catalogue.ts'
import type { RetryPolicy, UpstreamConfig } from './types.ts'

// The providers' slice of the config: the file's `providers` block, and the upstreams it and the
// environment's key variables enable (src/config.ts composes it).

/** The enabled providers by name, each with its connection limit. */
export type ProvidersConfig = Record<string, UpstreamConfig & { maxConnections: number }>

const timeoutsSchema = z
  .object({
    connectMs: timeoutMs
      .default(10_000)
      .describe('Longest time to open the TCP (and TLS) connection to the upstream.'),
    firstByteMs: timeoutMs
      .default(120_000)
      .describe("Longest time from sending the request to the upstream's response headers."),
    idleMs: timeoutMs
      .default(60_000)
      .describe("Longest silence between two chunks of the upstream's body, streams included."),
    // One bound for blocking calls and streams alike: 10 minutes is what OpenAI's own SDKs allow a
    // request, room for a slow reasoning answer or ~60k streamed tokens at 100 tokens/s, and it ends
    // before limits.reservationTtlMs (15 minutes) lets the call's credit reservation lapse.
    totalMs: timeoutMs
      .default(600_000)
      .describe(
        'Longest time from sending the request to the answer fully read, streams included (504 `upstream_timeout` past it).',
      ),
  })
  .strict()

const MiB = 1024 * 1024

export const retrySchema = z
  .object({
    attemptsPerDeployment: z
      .number()
      .int()
      .min(1)
      .max(10)
      .optional()
      .describe(
        'Calls one request may make to one deployment (the first included); `routing.retry` gives the default, 2.',
      ),
    backoffMs: z
      .number()
      .int()
      .min(0)
      .max(60_000)
      .optional()
      .describe(
        'First wait before calling a deployment again, doubled each time, with jitter; `routing.retry` gives the default, 250.',
      ),
    maxBackoffMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .optional()
      .describe('Longest wait between two calls of one deployment; `routing.retry` gives the default, 4000.'),
  })
  .strict()

const providerSchema = z
  .object({
    kind: z
      .enum(['openai-compat', 'anthropic', 'gemini', 'replicate', 'mock'])
      .describe('The wire protocol the provider speaks.'),
    baseUrl: z
      .url({ protocol: /^https?$/ })
      .optional()
      .describe(
        "Where the provider answers; a built-in provider's name brings its own (and its `…_BASE_URL` variable).",
      ),
    /** Name of the environment variable holding the key: keys never live in the file. */
    apiKeyEnv: z
      .string()
      .min(1)
      .optional()
      .describe(
        "Name of the environment variable that holds the provider's key (keys never live in the file); unset: no key is sent.",
      ),
    headers: z
      .record(z.string(), z.string())
      .default({})
      .describe('Extra headers sent with every call to this provider.'),
    timeouts: timeoutsSchema.prefault({}).describe('Upstream timeouts of this provider.'),
    /**
     * Most bytes read from a blocking answer's body, after decompression (streams: 8 MiB an event).
     * The default holds the largest OpenAI embeddings answer in JSON: 2,048 inputs × 3,072 floats,
     * pretty-printed one float a line, at most 32 bytes each ≈ 201 MB. The body is parsed as one
     * string, and V8's strings end at 2^29 − 24 characters: hence at most 500 MiB.
     */
    maxResponseBytes: z
      .number()
      .int()
      .positive()
      .max(500 * MiB)
      .default(256 * MiB)
      .describe(
        "Most bytes read from a blocking answer's body after decompression (502 past it); stream events are capped at 8 MiB each.",
      ),
    /** Open connections per upstream origin; requests beyond it queue. Streams hold one each. */
    maxConnections: z
      .number()
      .int()
      .positive()
      .max(10_000)
      .default(1024)
      .describe('Open connections per upstream origin; requests beyond it queue, and a stream holds one.'),
    latencyMs: z
      .number()
      .int()
      .min(0)
      .max(600_000)
      .default(0)
      .describe('The mock provider only: delay before each answer, its chunks spaced a tenth of it.'),
    outputLimitField: z
      .enum(['max_completion_tokens', 'max_tokens'])
      .optional()
      .describe(
        'OpenAI-compatible providers: the field the output limit is sent in; `max_tokens` unless the provider is `openai` or `groq`.',
      ),
    /** Overrides `routing.retry` for this provider's deployments. */
    retry: retrySchema.optional().describe("Overrides `routing.retry` for this provider's deployments."),
  })
  .strict()

/** The config file's `providers` block. */
export const providersSchema = z
  .record(z.string().regex(/^[a-z0-9][a-z0-9_-]*$/), providerSchema)
  .default({})
  .describe('Providers by name: OpenAI-compatible servers, Anthropic, Gemini, Replicate, the mock.')

/** The enabled providers: the built-in ones whose key variable is set, then the file's. */
export function resolveProviders(
  fileProviders: z.infer<typeof providersSchema>,
  env: Record<string, string | undefined>,
  mockLatencyMs: number | undefined,
  retry: RetryPolicy,
): ProvidersConfig {
  const out: ProvidersConfig = {}
  const add = (name: string, p: z.infer<typeof providerSchema>, preset?: BuiltinProvider): void => {
    const keyEnv = p.apiKeyEnv ?? preset?.keyEnv
    const apiKey = keyEnv === undefined ? undefined : env[keyEnv]
    if (p.kind !== 'mock' && p.apiKeyEnv !== undefined && !apiKey) {
      throw new ConfigError(`providers.${name}.apiKeyEnv: environment variable ${p.apiKeyEnv} is not set`)
    }
    const presetUrl = preset && ((preset.baseUrlEnv && env[preset.baseUrlEnv]) || preset.baseUrl)
    const baseUrl = p.baseUrl ?? presetUrl
    if (p.kind !== 'mock' && baseUrl === undefined) {
      throw new ConfigError(`providers.${name}.baseUrl: required for kind ${p.kind}`)
    }
    out[name] = {
      name,
      kind: p.kind as ProviderKind,
      baseUrl: (baseUrl ?? 'mock://local').replace(/\/+$/, ''),
      apiKey: apiKey || undefined,
      headers: p.headers,
      timeouts: p.timeouts,
      maxResponseBytes: p.maxResponseBytes,
      maxConnections: p.maxConnections,
      latencyMs: p.kind === 'mock' ? (mockLatencyMs ?? p.latencyMs) : 0,
      outputLimitField: p.outputLimitField ?? preset?.outputLimitField ?? 'max_tokens',
      retry: {
        attemptsPerDeployment: p.retry?.attemptsPerDeployment ?? retry.attemptsPerDeployment,
        backoffMs: p.retry?.backoffMs ?? retry.backoffMs,
        maxBackoffMs: Math.max(
          p.retry?.backoffMs ?? retry.backoffMs,
          p.retry?.maxBackoffMs ?? retry.maxBackoffMs,
        ),
      },
    }
  }

  // Zero-config: a provider whose key variable is set is enabled with its built-in model list.
  for (const preset of builtinProviders) {
    if (preset.keyEnv === undefined || env[preset.keyEnv]) {
      add(preset.name, providerSchema.parse({ kind: preset.kind }), preset)
    }
  }
  for (const [name, p] of Object.entries(fileProviders)) {
    add(
      name,
      p,
      builtinProviders.find((b) => b.name === name),
    )
  }
  return out
}

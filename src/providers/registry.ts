import { Agent, type Dispatcher } from 'undici'
import type { ProvidersConfig } from './config.ts'
import type { MediaAdapter } from './async-media/types.ts'
import type { ProviderAdapter, UpstreamConfig } from './types.ts'
import { createAnthropicAdapter } from './anthropic/adapter.ts'
import { createGeminiAdapter } from './gemini/adapter.ts'
import { createGeminiMediaAdapter } from './gemini/media.ts'
import { createMockAdapter } from './mock/adapter.ts'
import { createMockMediaAdapter } from './mock/media.ts'
import { createOpenAICompatAdapter } from './openai-compat/adapter.ts'
import { createOpenAIImagesAdapter } from './openai-compat/images.ts'
import { createReplicateAdapter } from './replicate/adapter.ts'
import type { ProviderKind } from '../domain/models.ts'

// The one provider registry: each configured provider with the capabilities its kind has. A kind
// that makes no media has no `media`; one that only makes media (Replicate) has no `adapter`. The
// router offers a deployment only for what its provider can do (chat and embeddings need `adapter`,
// predictions need `media`), so no capability is ever stubbed.

export interface Provider {
  config: UpstreamConfig
  /** Chat, streaming, embeddings (where `embed` exists) and token counting; absent for a media-only kind. */
  adapter?: ProviderAdapter
  /** Asynchronous media (predictions: image, video, speech); absent for a kind that makes none. */
  media?: MediaAdapter
  /** Keep-alive pools for this provider's origin; absent for the mock. */
  dispatcher?: Dispatcher
}

/** A provider that chats (what chat and embeddings routes are offered). */
export type ChatProvider = Provider & { adapter: ProviderAdapter }
/** A provider that makes media (what predictions are offered). */
export type MediaProvider = Provider & { media: MediaAdapter }

export interface ProviderRegistry {
  get(name: string): Provider | undefined
  close(): Promise<void>
}

export interface RegistryOptions {
  now?: () => number
  /** The media capability by provider kind (tests swap it); `mediaAdapterFor` otherwise. */
  mediaAdapterFor?: (kind: ProviderKind) => MediaAdapter | undefined
}

export interface MediaAdapterOptions {
  now: () => number
  /** The mock's task duration. */
  mockDelayMs: number
}

/** The chat capability of a provider kind: undefined where the kind does not chat. */
export function chatAdapterFor(kind: ProviderKind, now: () => number): ProviderAdapter | undefined {
  switch (kind) {
    case 'openai-compat':
      return createOpenAICompatAdapter(now)
    case 'anthropic':
      return createAnthropicAdapter(now)
    case 'gemini':
      return createGeminiAdapter(now)
    case 'mock':
      return createMockAdapter({ now })
    case 'replicate':
      return undefined
  }
}

/** The media capability of a provider kind: undefined where the kind makes no media. */
export function mediaAdapterFor(kind: ProviderKind, options: MediaAdapterOptions): MediaAdapter | undefined {
  switch (kind) {
    case 'openai-compat':
      return createOpenAIImagesAdapter()
    case 'replicate':
      return createReplicateAdapter()
    case 'gemini':
      return createGeminiMediaAdapter()
    case 'mock':
      return createMockMediaAdapter({ now: options.now, delayMs: options.mockDelayMs })
    case 'anthropic':
      return undefined
  }
}

/** The config slices the registry reads: the enabled providers, and how long a mock prediction takes. */
export interface RegistryConfig {
  providers: ProvidersConfig
  predictions: { mockDelayMs: number }
}

export function createProviderRegistry(
  config: RegistryConfig,
  options: RegistryOptions = {},
): ProviderRegistry {
  const now = options.now ?? Date.now
  const mediaOf =
    options.mediaAdapterFor ??
    ((kind: ProviderKind) => mediaAdapterFor(kind, { now, mockDelayMs: config.predictions.mockDelayMs }))
  const providers = new Map<string, Provider>()
  for (const p of Object.values(config.providers)) {
    const dispatcher =
      p.kind === 'mock'
        ? undefined
        : new Agent({
            connections: p.maxConnections,
            keepAliveTimeout: 30_000,
            connect: { timeout: p.timeouts.connectMs },
            headersTimeout: p.timeouts.firstByteMs,
            bodyTimeout: p.timeouts.idleMs,
          })
    providers.set(p.name, {
      config: p,
      adapter: chatAdapterFor(p.kind, now),
      media: mediaOf(p.kind),
      dispatcher,
    })
  }
  return {
    get: (name) => providers.get(name),
    async close() {
      await Promise.all([...providers.values()].map((p) => p.dispatcher?.close()))
    },
  }
}

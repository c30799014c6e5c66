import { Agent, type Dispatcher } from 'undici'
import { GatewayError } from '../errors.ts'
import type { Config } from '../config.ts'
import type { ProviderAdapter, ProviderKind, UpstreamConfig } from './types.ts'
import { createAnthropicAdapter } from './anthropic/adapter.ts'
import { createGeminiAdapter } from './gemini/adapter.ts'
import { createMockAdapter } from './mock/adapter.ts'
import { createOpenAICompatAdapter } from './openai-compat/adapter.ts'

export interface Provider {
  config: UpstreamConfig
  adapter: ProviderAdapter
  /** Keep-alive pools for this provider's origin; absent for the mock. */
  dispatcher?: Dispatcher
}

export interface ProviderRegistry {
  get(name: string): Provider | undefined
  close(): Promise<void>
}

export interface RegistryOptions {
  now?: () => number
}

/** A provider that serves predictions only: its chat models do not exist, so this is never routed to. */
const predictionsOnly: ProviderAdapter = {
  chat: () =>
    Promise.reject(new GatewayError('unsupported_parameter', 'this provider serves predictions only')),
  chatStream: () => ({
    [Symbol.asyncIterator]: () => ({
      next: () =>
        Promise.reject(new GatewayError('unsupported_parameter', 'this provider serves predictions only')),
    }),
  }),
}

function createAdapter(kind: ProviderKind, now: () => number): ProviderAdapter {
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
      return predictionsOnly
  }
}

export function createProviderRegistry(config: Config, options: RegistryOptions = {}): ProviderRegistry {
  const now = options.now ?? Date.now
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
    providers.set(p.name, { config: p, adapter: createAdapter(p.kind, now), dispatcher })
  }
  return {
    get: (name) => providers.get(name),
    async close() {
      await Promise.all([...providers.values()].map((p) => p.dispatcher?.close()))
    },
  }
}

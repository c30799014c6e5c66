import { createLogger } from '../../src/logger.ts'
import type { MediaCall } from '../../src/providers/async-media/types.ts'
import type { ProviderKind } from '../../src/providers/types.ts'

// A MediaCall for driving a media adapter directly against a fake upstream on 127.0.0.1.

export interface MediaCallOptions {
  kind: ProviderKind
  baseUrl: string
  apiKey?: string
  maxOutputBytes?: number
  /** The provider's configured extra headers. */
  headers?: Record<string, string>
  upstreamModel?: string
}

export function makeMediaCall(options: MediaCallOptions): MediaCall {
  return {
    upstream: {
      name: options.kind === 'replicate' ? 'replicate' : 'openai',
      kind: options.kind,
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      headers: options.headers ?? {},
      timeouts: { connectMs: 5_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: 10_000 },
      outputLimitField: 'max_tokens',
      retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
      maxResponseBytes: 1024 * 1024,
      latencyMs: 0,
    },
    upstreamModel: options.upstreamModel ?? 'm',
    signal: new AbortController().signal,
    log: createLogger('silent'),
    media: {
      ffmpegPath: 'ffmpeg',
      maxOutputBytes: options.maxOutputBytes ?? 1024 * 1024,
      fetchUserMedia: () => Promise.reject(new Error('these adapters never fetch client media')),
    },
  }
}

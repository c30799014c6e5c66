import type { ProviderKind } from '../types.ts'
import { createGeminiMediaAdapter } from '../gemini/media.ts'
import { createMockMediaAdapter } from '../mock/media.ts'
import { createOpenAIImagesAdapter } from '../openai-compat/images.ts'
import { createReplicateAdapter } from '../replicate/adapter.ts'
import type { MediaAdapter } from './types.ts'

// The media adapter of each provider kind: undefined where the kind makes no media.

export interface MediaAdapterOptions {
  now: () => number
  /** The mock's task duration. */
  mockDelayMs: number
}

export function mediaAdapterFor(
  kind: ProviderKind | string,
  options: MediaAdapterOptions,
): MediaAdapter | undefined {
  switch (kind) {
    case 'openai-compat':
      return createOpenAIImagesAdapter()
    case 'replicate':
      return createReplicateAdapter()
    case 'gemini':
      return createGeminiMediaAdapter()
    case 'mock':
      return createMockMediaAdapter({ now: options.now, delayMs: options.mockDelayMs })
    default:
      return undefined
  }
}

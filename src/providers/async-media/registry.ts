import type { ProviderKind } from '../types.ts'
import { createOpenAIImagesAdapter } from '../openai-compat/images.ts'
import { createReplicateAdapter } from '../replicate/adapter.ts'
import type { MediaAdapter } from './types.ts'

// The media adapter of each provider kind: undefined where the kind makes no media (yet).

export function mediaAdapterFor(kind: ProviderKind): MediaAdapter | undefined {
  switch (kind) {
    case 'openai-compat':
      return createOpenAIImagesAdapter()
    case 'replicate':
      return createReplicateAdapter()
    case 'gemini':
      // TODO(gemini media): speech and video A adapter lands here.
      return undefined
    case 'mock':
      // TODO(mock media): the mock's media adapter lands here.
      return undefined
    case 'anthropic':
      return undefined
  }
}

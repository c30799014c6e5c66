import type { MediaAdapter } from './types.ts'

// PLACEHOLDER: replaced by the adapters' factory when they land.
export function mediaAdapterFor(
  _kind: string,
  _options: { now: () => number; mockDelayMs: number },
): MediaAdapter | undefined {
  return undefined
}

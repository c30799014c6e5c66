import { Readable } from 'node:stream'
import type { OutputSource } from './types.ts'

// An output source for bytes already in memory in several parts (a WAV header and its samples): they
// are streamed to storage one after the other, never copied into one new buffer.

/** `parts` one after the other (a WAV header, then the samples), without concatenating them. */
export function buffersSource(parts: readonly Buffer[]): OutputSource {
  return {
    open: () => Promise.resolve({ stream: Readable.from(parts, { objectMode: false }) }),
    discard: () => Promise.resolve(),
  }
}

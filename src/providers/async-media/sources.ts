import { Readable } from 'node:stream'
import type { OutputSource } from './types.ts'

// Output sources for bytes that are already in memory: they are streamed to storage in slices, never
// copied whole into a new buffer.

/** Base64 characters decoded at a time: a multiple of 4, so every slice decodes on its own. */
const BASE64_SLICE = 64 * 1024

/** `parts` one after the other (a WAV header, then the samples), without concatenating them. */
export function buffersSource(parts: readonly Buffer[]): OutputSource {
  return {
    open: () => Promise.resolve({ stream: Readable.from(parts, { objectMode: false }) }),
    discard: () => Promise.resolve(),
  }
}

/**
 * The bytes of base64 text (an image an upstream answered inline in JSON), decoded slice by slice as
 * they are written: the text is in memory already (the parsed answer holds it), the decoded bytes
 * never are as a whole.
 */
export function base64Source(text: string): OutputSource {
  // Whitespace (line breaks some encoders add) would shift the slices: removed first, when there is any.
  const b64 = /\s/.test(text) ? text.replace(/\s+/g, '') : text
  return {
    open: () =>
      Promise.resolve({
        stream: Readable.from(slices(b64), { objectMode: false }),
      }),
    discard: () => Promise.resolve(),
  }
}

function* slices(b64: string): Generator<Buffer> {
  for (let i = 0; i < b64.length; i += BASE64_SLICE) {
    yield Buffer.from(b64.slice(i, i + BASE64_SLICE), 'base64')
  }
}

/** Decoded length of base64 text, without decoding it (padding and whitespace excluded). */
export function base64Length(b64: string): number {
  const clean = /\s/.test(b64) ? b64.replace(/\s+/g, '') : b64
  const padding = clean.endsWith('==') ? 2 : clean.endsWith('=') ? 1 : 0
  return Math.floor((clean.length * 3) / 4) - padding
}

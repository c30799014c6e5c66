import type { Pcm } from './audio.ts'
import type { SpeechInput } from '../../domain/media.ts'

// What a speech task used, in every unit a speech price can be given in: the characters of the text
// the client sent (prompt and style instructions, as both are sent upstream) and the audio tokens of
// the output. Every speech adapter reports both, so a per-character and a per-audio-token price are
// each charged whichever the model has (both when it has both).

/** Audio tokens a second of speech: the rate Gemini bills its speech output at. */
export const AUDIO_TOKENS_PER_SECOND = 25

/** The billable characters of a speech input. */
export function speechCharacters(input: Pick<SpeechInput, 'prompt' | 'style_instructions'>): number {
  return input.prompt.length + input.style_instructions.length
}

/** Audio tokens of a PCM output at that rate, a part token counting whole. */
export function audioTokensOf(pcm: Pcm): number {
  const seconds = pcm.data.length / 2 / pcm.channels / pcm.sampleRate
  return Math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)
}

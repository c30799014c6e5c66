import { startFfmpeg } from './ffmpeg.ts'
import { buffersSource } from './sources.ts'
import type { OutputSource } from './types.ts'

// Audio for speech tasks. Upstreams (Gemini speech generation) and the mock produce raw PCM; the
// client asks for mp3, wav or ogg_opus. WAV is a header in front of the samples, written here; MP3 and
// Ogg Opus are encoded by ffmpeg (Debian's package: libmp3lame and libopus), the well-kept encoder,
// run as a child process with the PCM on stdin and the file on stdout, streamed to storage as it comes.

export type AudioFormat = 'mp3' | 'wav' | 'ogg_opus'

/** Signed 16-bit little-endian samples, interleaved when `channels` > 1. */
export interface Pcm {
  data: Buffer
  sampleRate: number
  channels: number
}

export const AUDIO_CONTENT_TYPES: Record<AudioFormat, string> = {
  mp3: 'audio/mpeg',
  wav: 'audio/wav',
  ogg_opus: 'audio/ogg',
}

/** Seconds of sound in `pcm`. */
export function pcmSeconds(pcm: Pcm): number {
  return pcm.data.length / (2 * pcm.channels * pcm.sampleRate)
}

/** The 44-byte RIFF/WAVE header (PCM, 16-bit) of a file holding `pcm`: the samples follow it as they are. */
export function wavHeader(pcm: Pcm): Buffer {
  const header = Buffer.alloc(44)
  const blockAlign = pcm.channels * 2
  header.write('RIFF', 0, 'ascii')
  header.writeUInt32LE(36 + pcm.data.length, 4)
  header.write('WAVE', 8, 'ascii')
  header.write('fmt ', 12, 'ascii')
  header.writeUInt32LE(16, 16) // fmt chunk size
  header.writeUInt16LE(1, 20) // PCM
  header.writeUInt16LE(pcm.channels, 22)
  header.writeUInt32LE(pcm.sampleRate, 24)
  header.writeUInt32LE(pcm.sampleRate * blockAlign, 28)
  header.writeUInt16LE(blockAlign, 32)
  header.writeUInt16LE(16, 34) // bits per sample
  header.write('data', 36, 'ascii')
  header.writeUInt32LE(pcm.data.length, 40)
  return header
}

export interface EncodeOptions {
  /** The ffmpeg executable (`ffmpeg` on the PATH unless configured). */
  ffmpegPath: string
  signal?: AbortSignal
}

const FFMPEG_ARGS: Record<Exclude<AudioFormat, 'wav'>, string[]> = {
  mp3: ['-c:a', 'libmp3lame', '-b:a', '128k', '-f', 'mp3'],
  ogg_opus: ['-c:a', 'libopus', '-b:a', '64k', '-f', 'ogg'],
}

/**
 * `pcm` as a file of `format`, with its content type. The file is a source the output keeper streams:
 * WAV is the header then the samples (not copied into one buffer); MP3 and Ogg Opus are ffmpeg's
 * stdout, started here (up to its first byte) so that an ffmpeg that cannot encode fails the step at once.
 */
export async function encodeAudio(
  pcm: Pcm,
  format: AudioFormat,
  options: EncodeOptions,
): Promise<{ data: OutputSource; contentType: string }> {
  const contentType = AUDIO_CONTENT_TYPES[format]
  if (format === 'wav') return { data: buffersSource([wavHeader(pcm), pcm.data]), contentType }
  const args = [
    ...['-f', 's16le', '-ar', String(pcm.sampleRate), '-ac', String(pcm.channels), '-i', 'pipe:0'],
    ...FFMPEG_ARGS[format],
    'pipe:1',
  ]
  const data = await startFfmpeg(args, {
    path: options.ffmpegPath,
    what: 'audio encoding',
    input: pcm.data,
    signal: options.signal,
  })
  return { data, contentType }
}

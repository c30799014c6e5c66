import { mkdtemp, open, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runFfmpeg } from './ffmpeg.ts'
import type { OutputSource } from './types.ts'

// A real, small MP4 for the mock provider's video tasks: ffmpeg's test pattern at the requested length
// and shape, H.264 in an MP4 with its index (moov) in front. MP4 needs a seekable output to write its
// index, so ffmpeg writes a temporary file, which the output keeper then streams to storage; the
// temporary directory goes when the file is opened (or the source discarded).

export interface TestVideo {
  seconds: number
  width: number
  height: number
}

export async function renderTestVideo(
  v: TestVideo,
  options: { ffmpegPath: string; signal?: AbortSignal },
): Promise<OutputSource> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-video-'))
  const out = join(dir, 'video.mp4')
  const remove = (): Promise<void> => rm(dir, { recursive: true, force: true })
  try {
    const args = [
      '-y',
      ...['-f', 'lavfi', '-i', `testsrc=size=${v.width}x${v.height}:rate=10:duration=${v.seconds}`],
      ...['-c:v', 'libx264', '-preset', 'ultrafast', '-pix_fmt', 'yuv420p'],
      ...['-movflags', '+faststart', '-f', 'mp4', out],
    ]
    await runFfmpeg(args, { path: options.ffmpegPath, what: 'video rendering', signal: options.signal })
  } catch (err) {
    await remove()
    throw err
  }
  return {
    async open() {
      // Opened, then removed at once: the open handle keeps the bytes readable until the stream is
      // done with them, and nothing is left to clean up however the read ends.
      const handle = await open(out, 'r')
      try {
        await remove()
      } catch (err) {
        await handle.close()
        throw err
      }
      return { stream: handle.createReadStream() }
    },
    discard: remove,
  }
}

import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runFfmpeg } from './ffmpeg.ts'

// A real, small MP4 for the mock provider's video tasks: ffmpeg's test pattern at the requested length
// and shape, H.264 in an MP4 with its index (moov) in front. MP4 needs a seekable output to write its
// index, so ffmpeg writes a temporary file that is read back and removed.

export interface TestVideo {
  seconds: number
  width: number
  height: number
}

export async function renderTestVideo(
  v: TestVideo,
  options: { ffmpegPath: string; signal?: AbortSignal },
): Promise<Buffer> {
  const dir = await mkdtemp(join(tmpdir(), 'junction-video-'))
  const out = join(dir, 'video.mp4')
  try {
    const args = [
      '-y',
      ...['-f', 'lavfi', '-i', `testsrc=size=${v.width}x${v.height}:rate=10:duration=${v.seconds}`],
      ...['-c:v', 'libx264', '-preset', 'ultrafast', '-pix_fmt', 'yuv420p'],
      ...['-movflags', '+faststart', '-f', 'mp4', out],
    ]
    await runFfmpeg(args, { path: options.ffmpegPath, what: 'video rendering', signal: options.signal })
    return await readFile(out)
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

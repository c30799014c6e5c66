import { spawn } from 'node:child_process'
import { GatewayError } from '../../errors.ts'

// ffmpeg as a child process (Debian's package: libmp3lame, libopus, libx264): `input` on stdin, what
// it writes to stdout returned. Its own messages stay out of client errors (they go to the log as the
// cause); a missing executable says how to install it.

export interface FfmpegOptions {
  /** The executable (`ffmpeg` on the PATH unless configured). */
  path: string
  /** What the run is for, in errors: `audio encoding`, `video rendering`. */
  what: string
  input?: Buffer
  signal?: AbortSignal
}

export function runFfmpeg(args: string[], options: FfmpegOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = spawn(options.path, ['-hide_banner', '-loglevel', 'error', '-nostdin', ...args], {
      stdio: [options.input ? 'pipe' : 'ignore', 'pipe', 'pipe'],
      signal: options.signal,
    })
    const out: Buffer[] = []
    let err = ''
    child.stdout?.on('data', (b: Buffer) => out.push(b))
    child.stderr?.on('data', (b: Buffer) => {
      if (err.length < 2000) err += b.toString()
    })
    child.on('error', (e: NodeJS.ErrnoException) => {
      reject(
        e.code === 'ENOENT'
          ? new GatewayError(
              'internal_error',
              `${options.what}: ffmpeg not found, install it (${options.path})`,
              {
                cause: e,
              },
            )
          : e,
      )
    })
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out))
      else
        reject(new GatewayError('internal_error', `${options.what} failed`, { cause: new Error(err.trim()) }))
    })
    if (options.input && child.stdin) {
      // A closed stdin (ffmpeg exited early) is reported by 'close' with its exit code.
      child.stdin.on('error', () => {})
      child.stdin.end(options.input)
    }
  })
}

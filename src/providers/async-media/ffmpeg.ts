import { spawn, type ChildProcess } from 'node:child_process'
import { PassThrough } from 'node:stream'
import { GatewayError } from '../../errors.ts'
import type { OutputSource } from './types.ts'

// ffmpeg as a child process (Debian's package: libmp3lame, libopus, libx264): `input` on stdin, its
// output either a file it writes (runFfmpeg) or its stdout streamed (startFfmpeg), so an encoded
// file is never whole in memory. Its own messages stay out of client errors (they go to the log as
// the cause); a missing executable says how to install it.

export interface FfmpegOptions {
  /** The executable (`ffmpeg` on the PATH unless configured). */
  path: string
  /** What the run is for, in errors: `audio encoding`, `video rendering`. */
  what: string
  input?: Buffer
  signal?: AbortSignal
}

/** Bytes of ffmpeg's error output kept for the log. */
const MAX_ERROR_TEXT = 2000

function launch(args: string[], options: FfmpegOptions): { child: ChildProcess; errors: () => string } {
  const child = spawn(options.path, ['-hide_banner', '-loglevel', 'error', '-nostdin', ...args], {
    stdio: [options.input ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    signal: options.signal,
  })
  let err = ''
  child.stderr?.on('data', (b: Buffer) => {
    if (err.length < MAX_ERROR_TEXT) err += b.toString()
  })
  if (options.input && child.stdin) {
    // A closed stdin (ffmpeg exited early) is reported by 'close' with its exit code.
    child.stdin.on('error', () => {})
    child.stdin.end(options.input)
  }
  return { child, errors: () => err.trim() }
}

function notStarted(e: NodeJS.ErrnoException, options: FfmpegOptions): Error {
  return e.code === 'ENOENT'
    ? new GatewayError('internal_error', `${options.what}: ffmpeg not found, install it (${options.path})`, {
        cause: e,
      })
    : e
}

function failed(options: FfmpegOptions, text: string): GatewayError {
  return new GatewayError('internal_error', `${options.what} failed`, { cause: new Error(text) })
}

/** Runs ffmpeg to its end; resolves with what it wrote to stdout (nothing when it writes a file). */
export function runFfmpeg(args: string[], options: FfmpegOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const { child, errors } = launch(args, options)
    const out: Buffer[] = []
    child.stdout?.on('data', (b: Buffer) => out.push(b))
    child.on('error', (e: NodeJS.ErrnoException) => reject(notStarted(e, options)))
    child.on('close', (code) => {
      if (code === 0) resolve(Buffer.concat(out))
      else reject(failed(options, errors()))
    })
  })
}

/**
 * Starts ffmpeg writing to stdout and resolves once its first byte is out, so that an ffmpeg that
 * cannot run (missing, or without the encoder asked) rejects here, in the task's step, which then
 * fails at once. Its output is a source: the stream passes stdout on with backpressure (ffmpeg
 * waits while storage is slower) and ends only when ffmpeg exits 0; a later failure fails it.
 * Destroying the stream, or discarding the source, kills ffmpeg.
 */
export function startFfmpeg(args: string[], options: FfmpegOptions): Promise<OutputSource> {
  return new Promise((resolve, reject) => {
    const { child, errors } = launch(args, options)
    const out = new PassThrough()
    const kill = (): void => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
    }
    const source: OutputSource = {
      open: () => Promise.resolve({ stream: out }),
      discard: () => {
        out.destroy()
        kill()
        return Promise.resolve()
      },
    }
    let settled = false
    const ready = (): void => {
      if (settled) return
      settled = true
      resolve(source)
    }
    const fail = (err: Error): void => {
      if (settled) {
        out.destroy(err)
        return
      }
      settled = true
      kill()
      out.destroy()
      reject(err)
    }
    child.stdout?.pipe(out, { end: false })
    child.stdout?.once('data', ready)
    child.on('error', (e: NodeJS.ErrnoException) => fail(settled ? e : notStarted(e, options)))
    child.on('close', (code) => {
      if (code !== 0) return fail(failed(options, errors()))
      // Exited 0 without a byte: an empty output.
      ready()
      out.end()
    })
    // A failure before the keeper reads is kept by the stream (`errored`) and met when it is read.
    out.on('error', () => {})
    out.on('close', kill)
  })
}

import { pino, type Logger as PinoLogger } from 'pino'
import type { FastifyBaseLogger } from 'fastify'

/** Any pino-compatible logger: the root logger or a request's child. */
export type Logger = FastifyBaseLogger

/** Paths pino replaces with "[redacted]" wherever an object with them is logged. */
export const redactPaths = [
  'authorization',
  'apiKey',
  'api_key',
  'key',
  'headers.authorization',
  'headers["x-api-key"]',
  'headers["x-goog-api-key"]',
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'req.headers.cookie',
  'upstream.apiKey',
  'config.providers.*.apiKey',
]

/**
 * pino's `isoTime` (`,"time":"<ISO 8601>"`), without a Date and its formatting per line: the text up to
 * the second is kept until the second changes, and only the milliseconds are written each time.
 * The same text as `new Date(now).toISOString()` for the years 1970 to 9999.
 */
export function createIsoTime(now: () => number = Date.now): () => string {
  let second = Number.NaN
  let prefix = ''
  return () => {
    const t = now()
    const ms = t % 1000
    if (t - ms !== second) {
      second = t - ms
      prefix = `,"time":"${new Date(second).toISOString().slice(0, 20)}`
    }
    return `${prefix}${ms < 10 ? '00' : ms < 100 ? '0' : ''}${ms}Z"`
  }
}

/** Lines are written to stdout once this many bytes are held, or every FLUSH_MS (the lines of a busy moment in one write). */
const MIN_WRITE_BYTES = 8 * 1024
/** The longest a line waits for its write. */
const FLUSH_MS = 100

/**
 * The root logger. Without a `destination` it writes to stdout asynchronously (a buffered SonicBoom
 * that writes when the event loop is free, flushed on exit), so a slow stdout never blocks requests.
 * Lines are gathered into writes of MIN_WRITE_BYTES, or whatever FLUSH_MS brought: a write per line
 * cost more than the line itself (a write request through libuv's thread pool, ≈20 µs of the event
 * loop's time per request under load). They are gathered here (`LineBatch`), not by SonicBoom.
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): PinoLogger {
  return pino(
    {
      level,
      base: { service: 'junction' },
      timestamp: createIsoTime(),
      redact: { paths: redactPaths, censor: '[redacted]' },
    },
    destination ?? new LineBatch(pino.destination({ dest: 1, sync: false })),
  )
}

type SonicBoom = ReturnType<typeof pino.destination>
/** Ended or broken (SonicBoom's field, missing from its types). */
const gone = (sink: SonicBoom): boolean => (sink as unknown as { destroyed?: boolean }).destroyed === true

/** Batches holding lines not yet given to their SonicBoom: written out when the process exits. */
const holding = new Set<LineBatch>()
let exitHooked = false

/**
 * A stream of log lines in front of a SonicBoom: lines are kept in a list and handed over joined, one
 * string per MIN_WRITE_BYTES or per FLUSH_MS. SonicBoom's own gathering (`minLength`) appends each
 * line to the text it holds and measures that text's UTF-8 length again on every line, a scan of up
 * to MIN_WRITE_BYTES per line (≈4 µs of a blocking request); a join per batch is one.
 * On exit (and before it, when the event loop ran dry) what is held goes to the SonicBoom, which
 * pino flushes synchronously on exit as it did before.
 */
class LineBatch {
  private lines: string[] = []
  private chars = 0
  private timer: NodeJS.Timeout | undefined
  private readonly sink: SonicBoom

  constructor(sink: SonicBoom) {
    this.sink = sink
    if (!exitHooked) {
      exitHooked = true
      const release = (): void => {
        for (const batch of holding) batch.release()
      }
      process.on('beforeExit', release)
      process.on('exit', () => {
        for (const batch of holding) {
          batch.release()
          try {
            if (!gone(batch.sink)) batch.sink.flushSync()
          } catch {
            // stdout is gone (or not writable now): the lines are lost, as they would be without this.
          }
        }
      })
    }
  }

  write(line: string): boolean {
    this.lines.push(line)
    // Characters, not bytes: a threshold, and a UTF-8 measure is the scan this saves.
    this.chars += line.length
    if (this.chars >= MIN_WRITE_BYTES) this.release()
    else if (this.timer === undefined) {
      holding.add(this)
      this.timer = setTimeout(() => this.release(), FLUSH_MS).unref()
    }
    return true
  }

  /** Hands the held lines to the SonicBoom, which writes them when the event loop is free. */
  release(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer)
      this.timer = undefined
    }
    holding.delete(this)
    if (this.lines.length === 0 || gone(this.sink)) return
    const text = this.lines.length === 1 ? this.lines[0]! : this.lines.join('')
    this.lines = []
    this.chars = 0
    this.sink.write(text)
  }

  flush(cb?: (err?: Error) => void): void {
    this.release()
    this.sink.flush(cb)
  }

  flushSync(): void {
    this.release()
    this.sink.flushSync()
  }

  end(): void {
    this.release()
    this.sink.end()
  }
}

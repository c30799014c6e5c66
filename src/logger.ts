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
 * loop's time per request under load).
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): PinoLogger {
  return pino(
    {
      level,
      base: { service: 'junction' },
      timestamp: createIsoTime(),
      redact: { paths: redactPaths, censor: '[redacted]' },
    },
    destination ??
      pino.destination({ dest: 1, sync: false, minLength: MIN_WRITE_BYTES, periodicFlush: FLUSH_MS }),
  )
}

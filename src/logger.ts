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
 * The root logger. Without a `destination` it writes to stdout asynchronously (a buffered SonicBoom
 * that writes when the event loop is free, flushed on exit), so a slow stdout never blocks requests.
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): PinoLogger {
  return pino(
    {
      level,
      base: { service: 'junction' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactPaths, censor: '[redacted]' },
    },
    destination ?? pino.destination({ dest: 1, sync: false }),
  )
}

import { z } from 'zod'
import type { CorsConfig } from './cors.ts'

// The HTTP server's slice of the config: where it listens and the limits on clients (the file's
// `server` block; PORT, HOST, LOG_LEVEL and two GATEWAY_ variables override it).

export interface ServerConfig {
  host: string
  port: number
  /** Largest accepted JSON body. */
  bodyLimitBytes: number
  /** How long in-flight requests and streams get to finish after SIGTERM. */
  shutdownGraceMs: number
  logLevel: string
  /** How long an idle keep-alive client connection stays open. */
  keepAliveTimeoutMs: number
  /** Longest time to receive a whole request, body included (408 after it). */
  requestTimeoutMs: number
  /** Longest time to receive a request's headers (408 after it). */
  headersTimeoutMs: number
  /** Longest silence while a request body is still arriving (408 after it). */
  bodyIdleTimeoutMs: number
  /** Bytes of unfinished JSON bodies held across all connections; past it new bytes are refused (503). */
  maxBufferedBodyBytes: number
  /** The most of maxBufferedBodyBytes one account may hold; past it its new bytes are refused (429). */
  maxBufferedBodyBytesPerAccount: number
  /** Slowest a request body may arrive, in bytes per second over bodyRateWindowMs (408 below it); 0: no floor. */
  bodyMinBytesPerSecond: number
  /** The window of the rate floor, and the grace before it is first checked. */
  bodyRateWindowMs: number
  /** Deepest nesting of objects and arrays a JSON body may have (400 `too_deep` past it). */
  maxJsonDepth: number
  /** Open connections one client address may hold; past it a new one is closed at once. 0: no limit. */
  maxConnectionsPerAddress: number
  /** Browser access to /v1 and /routed/v1 (http/cors.ts); off while allowedOrigins is empty. */
  cors: CorsConfig
}

/** Ten minutes: a 512 MiB upload (the default file limit) fits at about 1 MB/s. */
const DEFAULT_REQUEST_TIMEOUT_MS = 600_000

/** `*`, or scheme://host[:port] exactly as a browser sends it in Origin (no path, no trailing slash). */
function isOriginOrStar(value: string): boolean {
  if (value === '*') return true
  try {
    const url = new URL(value)
    return (url.protocol === 'http:' || url.protocol === 'https:') && url.origin === value
  } catch {
    return false
  }
}

/** The config file's `server` block. */
export const serverSchema = z
  .object({
    host: z.string().min(1).optional().describe('Address to listen on.'),
    port: z.number().int().min(0).max(65535).optional().describe('Port to listen on (0: any free port).'),
    bodyLimitBytes: z
      .number()
      .int()
      .positive()
      .max(1024 ** 3)
      .optional()
      .describe('Largest JSON body (413 above).'),
    shutdownGraceMs: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('How long in-flight requests and streams get to finish after SIGTERM or SIGINT.'),
    logLevel: z
      .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
      .optional()
      .describe('pino log level (`silent` turns logs off).'),
    keepAliveTimeoutMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('How long an idle keep-alive client connection stays open.'),
    requestTimeoutMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Longest time to receive a whole request, body included (408 after it).'),
    headersTimeoutMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe("Longest time to receive a request's headers (408 after it); at most `requestTimeoutMs`."),
    bodyIdleTimeoutMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Longest silence while a request body is still arriving (408 after it).'),
    maxBufferedBodyBytes: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'Bytes of unfinished JSON bodies held across all connections; past it new bytes are refused (503 `server_busy`).',
      ),
    maxBufferedBodyBytesPerAccount: z
      .number()
      .int()
      .positive()
      .optional()
      .describe(
        'The most of `maxBufferedBodyBytes` one account may hold (429 past it); a quarter of it, at least `bodyLimitBytes`, when unset.',
      ),
    bodyMinBytesPerSecond: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe('Slowest a request body may arrive over `bodyRateWindowMs` (408 below it); 0: no floor.'),
    bodyRateWindowMs: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('The window of the body rate floor, and the grace before it is first checked.'),
    maxJsonDepth: z
      .number()
      .int()
      .min(2)
      .max(1000)
      .optional()
      .describe('Deepest nesting of objects and arrays a JSON body may have (400 `too_deep` past it).'),
    maxConnectionsPerAddress: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe(
        'Open connections one client address may hold; past it a new one is closed unread. 0: no limit (leave it so behind a reverse proxy).',
      ),
    cors: z
      .object({
        /** Exact origins (`https://app.example.com`) or `*`. */
        allowedOrigins: z
          .array(z.string().refine(isOriginOrStar, 'must be * or an origin such as https://app.example.com'))
          .describe(
            'Exact origins (`https://app.example.com`) or `*` allowed to call the API from a browser.',
          ),
      })
      .strict()
      .optional()
      .describe('Browser access to `/v1` and `/routed/v1`; off while `allowedOrigins` is empty.'),
  })
  .strict()
  .refine(
    (s) =>
      s.headersTimeoutMs === undefined ||
      s.headersTimeoutMs <= (s.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS),
    { message: 'headersTimeoutMs must not be above requestTimeoutMs', path: ['headersTimeoutMs'] },
  )
  .default({})
  .describe('The HTTP server and the limits on clients.')

/** The server settings the environment gives, over the file's. */
export interface ServerEnv {
  host?: string
  port?: number
  bodyLimitBytes?: number
  shutdownGraceMs?: number
  logLevel?: string
}

export function resolveServer(s: z.infer<typeof serverSchema>, env: ServerEnv): ServerConfig {
  const requestTimeoutMs = s.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS
  const bodyLimitBytes = env.bodyLimitBytes ?? s.bodyLimitBytes ?? 10 * 1024 * 1024
  const maxBufferedBodyBytes = s.maxBufferedBodyBytes ?? 256 * 1024 * 1024
  return {
    host: env.host ?? s.host ?? '0.0.0.0',
    port: env.port ?? s.port ?? 8080,
    bodyLimitBytes,
    shutdownGraceMs: env.shutdownGraceMs ?? s.shutdownGraceMs ?? 30_000,
    logLevel: env.logLevel ?? s.logLevel ?? 'info',
    keepAliveTimeoutMs: s.keepAliveTimeoutMs ?? 72_000,
    requestTimeoutMs,
    headersTimeoutMs: s.headersTimeoutMs ?? Math.min(30_000, requestTimeoutMs),
    bodyIdleTimeoutMs: s.bodyIdleTimeoutMs ?? 30_000,
    maxBufferedBodyBytes,
    maxBufferedBodyBytesPerAccount: Math.min(
      maxBufferedBodyBytes,
      s.maxBufferedBodyBytesPerAccount ?? Math.max(bodyLimitBytes, Math.floor(maxBufferedBodyBytes / 4)),
    ),
    bodyMinBytesPerSecond: s.bodyMinBytesPerSecond ?? 1024,
    bodyRateWindowMs: s.bodyRateWindowMs ?? 10_000,
    maxJsonDepth: s.maxJsonDepth ?? 64,
    maxConnectionsPerAddress: s.maxConnectionsPerAddress ?? 0,
    cors: { allowedOrigins: s.cors?.allowedOrigins ?? [] },
  }
}

import { GatewayError, type ErrorCode } from '../../errors.ts'

// What the event loop's side (thread.ts) and the database thread (worker.ts) tell each other.

export interface SqliteWorkerData {
  path: string
  retentionDays?: number
  busyTimeoutMs: number
  /** Set while the checkpoint thread runs: SQLite's own checkpoint is then only a fallback. */
  autoCheckpointPages?: number
  /** Tests: blocks this thread before each message while its first element is 1 (a stalled disk). */
  stallGate?: Int32Array
}

export type WorkerRequest =
  /** `calls`: [namespace ('' for the store itself), method, arguments]. */
  | { type: 'batch'; id: number; deadline: number; calls: [string, string, unknown[]][] }
  | { type: 'autocheckpoint'; pages: number }
  | { type: 'close' }

export interface WireError {
  name: string
  message: string
  /** A GatewayError's code and options. */
  code?: ErrorCode
  param?: string | null
  headers?: Record<string, string>
  retryable?: boolean
  /** What caused it (the database's own error), for the log. */
  cause?: string
}

export interface WorkerReply {
  type: 'batch'
  id: number
  /** The API-key cache's generation once the message was done (SqliteEngine.cacheEpoch). */
  epoch: number
  results: ({ ok: true; value: unknown } | { ok: false; error: WireError })[]
}

/**
 * What the database thread answers for a `ledger.settle` that charged the record it was given,
 * unchanged: the event loop's side returns its own copy rather than receiving the record back.
 */
export const SETTLED_AS_GIVEN = 'settled-as-given'

const describe = (err: unknown): string => {
  if (!(err instanceof Error)) return String(err)
  const code = (err as { code?: unknown }).code
  return typeof code === 'string' ? `${code}: ${err.message}` : err.message
}

export const toWire = (err: unknown): WireError =>
  err instanceof GatewayError
    ? {
        name: err.name,
        message: err.message,
        code: err.code,
        param: err.param,
        headers: err.headers,
        retryable: err.retryable,
        ...(err.cause === undefined ? {} : { cause: describe(err.cause) }),
      }
    : err instanceof Error
      ? { name: err.name, message: err.message }
      : { name: 'Error', message: String(err) }

export const fromWire = (e: WireError): Error =>
  e.code !== undefined
    ? new GatewayError(e.code, e.message, {
        param: e.param ?? undefined,
        headers: e.headers,
        retryable: e.retryable,
        ...(e.cause === undefined ? {} : { cause: new Error(e.cause) }),
      })
    : Object.assign(new Error(e.message), e.name === 'Error' ? {} : { name: e.name })

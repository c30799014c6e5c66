import { errors as undiciErrors, request, type Dispatcher } from 'undici'
import { GatewayError, UpstreamError } from '../errors.ts'
import type { UpstreamCall } from './types.ts'

// The one place adapters do HTTP. Timeouts: connect is set on the pool (deps.ts), first byte and
// idle per request here, so every protocol folder gets the same behaviour.

export interface UpstreamResponse {
  status: number
  headers: Record<string, string | string[] | undefined>
  body: Dispatcher.ResponseData['body']
}

export async function postUpstream(
  call: UpstreamCall,
  url: string,
  headers: Record<string, string>,
  payload: unknown,
): Promise<UpstreamResponse> {
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: call.dispatcher,
      headers: { 'content-type': 'application/json', ...call.upstream.headers, ...headers },
      body: JSON.stringify(payload),
      signal: call.signal,
      headersTimeout: call.upstream.timeouts.firstByteMs,
      bodyTimeout: call.upstream.timeouts.idleMs,
    })
    call.onFirstByte?.()
    return { status: res.statusCode, headers: res.headers, body: res.body }
  } catch (err) {
    throw fromNetworkError(err, call)
  }
}

/** Reads at most `limit` bytes of an (error) body as text and discards the rest. */
export async function readLimited(body: AsyncIterable<Uint8Array>, limit = 64 * 1024): Promise<string> {
  const parts: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    if (size < limit) {
      const b = Buffer.from(chunk)
      parts.push(b.subarray(0, limit - size))
      size += b.length
    }
  }
  return Buffer.concat(parts).toString('utf8')
}

/** Reads a JSON body; a body that is not JSON is the upstream's fault (502). */
export async function readJson(call: UpstreamCall, body: UpstreamResponse['body']): Promise<unknown> {
  let text: string
  try {
    text = await body.text()
  } catch (err) {
    throw fromNetworkError(err, call)
  }
  try {
    return JSON.parse(text)
  } catch (err) {
    throw malformedUpstream(call, 'response body is not valid JSON', err)
  }
}

export function malformedUpstream(call: UpstreamCall, what: string, cause?: unknown): UpstreamError {
  return new UpstreamError('upstream_error', `upstream ${call.upstream.name}: ${what}`, {
    provider: call.upstream.name,
    upstreamStatus: 200,
    retryable: true,
    cause,
  })
}

const timeoutCodes = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

/**
 * Network-level failures. A request aborted because the client went away is re-thrown unchanged:
 * the route knows its own signal and records a cancellation, not an upstream fault.
 */
export function fromNetworkError(err: unknown, call: UpstreamCall): unknown {
  if (err instanceof GatewayError) return err
  if (call.signal.aborted) return err
  const code = (err as { code?: string }).code ?? ''
  const name = call.upstream.name
  if (timeoutCodes.has(code) || err instanceof undiciErrors.ConnectTimeoutError) {
    const phase =
      code === 'UND_ERR_CONNECT_TIMEOUT'
        ? 'connect'
        : code === 'UND_ERR_HEADERS_TIMEOUT'
          ? 'first byte'
          : 'idle'
    return new UpstreamError('upstream_timeout', `upstream ${name} timed out (${phase})`, {
      provider: name,
      retryable: true,
      cause: err,
    })
  }
  return new UpstreamError(
    'upstream_error',
    `upstream ${name} connection failed (${code || 'network error'})`,
    {
      provider: name,
      retryable: true,
      cause: err,
    },
  )
}

const secretPatterns: [RegExp, string][] = [
  [/\b(?:sk|pk|rk|gsk|xai|AIza)[-_A-Za-z0-9]{8,}/g, '[redacted]'],
  [/\bBearer\s+[^\s"']+/gi, 'Bearer [redacted]'],
  [/([?&](?:key|api_key|apikey|token)=)[^&\s"']+/gi, '$1[redacted]'],
]

/** Removes anything that looks like a credential from a provider's message before a client sees it. */
export function scrubSecrets(text: string, known: (string | undefined)[] = []): string {
  let out = text
  for (const k of known) if (k && k.length >= 4) out = out.split(k).join('[redacted]')
  for (const [pattern, replacement] of secretPatterns) out = out.replace(pattern, replacement)
  return out.length > 500 ? `${out.slice(0, 500)}…` : out
}

export function headerValue(headers: UpstreamResponse['headers'], name: string): string | undefined {
  const v = headers[name]
  return Array.isArray(v) ? v[0] : v
}

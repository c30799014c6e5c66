import { randomBytes } from 'node:crypto'

// W3C Trace Context (https://www.w3.org/TR/trace-context/): a client's `traceparent` is continued to
// the upstream calls, with a new span id for the gateway's part, so the upstream's trace joins the
// client's. A missing or malformed header starts nothing: no trace is invented for the client.

export interface TraceContext {
  traceId: string
  /** The gateway's span: the parent of its upstream calls. */
  spanId: string
  /** The client's span, the gateway's parent. */
  parentId: string
  /** The header to send upstream. */
  traceparent: string
}

const pattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

export function continueTrace(
  header: string | string[] | undefined,
  newSpanId: () => string = () => randomBytes(8).toString('hex'),
): TraceContext | undefined {
  if (typeof header !== 'string') return undefined
  const m = pattern.exec(header.trim().toLowerCase())
  if (!m) return undefined
  const [, version, traceId, parentId, flags] = m as unknown as [string, string, string, string, string]
  // Version ff is invalid; all-zero ids are invalid.
  if (version === 'ff' || /^0+$/.test(traceId) || /^0+$/.test(parentId)) return undefined
  const spanId = newSpanId()
  return { traceId, spanId, parentId, traceparent: `00-${traceId}-${spanId}-${flags}` }
}

import type { FastifyRequest } from 'fastify'
import type { IncomingMessage } from 'node:http'
import { GatewayError, formatPath, invalidRequest } from '../errors.ts'

// The one JSON body parser: reads the body under the body limit and the shared byte budget, refuses
// too-deep nesting before JSON.parse builds anything, then parses. It replaces Fastify's parser, so
// every JSON route (and its error messages) goes through here.

/**
 * Bytes of JSON bodies still arriving, across all connections: what slow clients can pin. Each account
 * holds at most `perAccountBytes` of it, so one account's slow bodies leave the rest to the others
 * (with the defaults, a quarter of the whole: four accounts must misbehave at once to fill it).
 */
export interface BodyBudget {
  /**
   * Counts `bytes` as held by `account`: 'ok', or nothing counted and 'full' when the whole bound
   * would be passed, 'account' when that account's share would.
   */
  take(account: string, bytes: number): 'ok' | 'account' | 'full'
  release(account: string, bytes: number): void
  /** Bytes held right now, by everyone. */
  readonly held: number
  /** Bytes the account holds right now. */
  heldBy(account: string): number
  readonly maxBytes: number
  readonly perAccountBytes: number
}

export function createBodyBudget(maxBytes: number, perAccountBytes = maxBytes): BodyBudget {
  let held = 0
  const byAccount = new Map<string, number>()
  return {
    take(account, bytes) {
      const mine = byAccount.get(account) ?? 0
      if (held + bytes > maxBytes) return 'full'
      if (mine + bytes > perAccountBytes) return 'account'
      held += bytes
      byAccount.set(account, mine + bytes)
      return 'ok'
    },
    release(account, bytes) {
      held -= bytes
      const left = (byAccount.get(account) ?? 0) - bytes
      if (left > 0) byAccount.set(account, left)
      else byAccount.delete(account)
    },
    get held() {
      return held
    },
    heldBy(account) {
      return byAccount.get(account) ?? 0
    },
    maxBytes,
    perAccountBytes,
  }
}

export interface JsonBodyOptions {
  bodyLimit: number
  maxDepth: number
  budget: BodyBudget
}

type Done = (err: Error | null, body?: unknown) => void

/** A Fastify content-type parser (the raw-stream form) for `application/json`. */
export function createJsonBodyParser(
  options: JsonBodyOptions,
): (request: FastifyRequest, payload: IncomingMessage, done: Done) => void {
  const { bodyLimit, maxDepth, budget } = options
  return (request, payload, done) => {
    if (Number(request.headers['content-length']) > bodyLimit) {
      done(tooLarge(bodyLimit))
      return
    }
    // The account the bytes count against; '' for the routes without one (admin, health).
    const owner = (request.account as { id: string } | null)?.id ?? ''
    const chunks: Buffer[] = []
    let received = 0
    let finished = false

    const finish = (err: Error | null, text?: string): void => {
      if (finished) return
      finished = true
      payload.off('data', onData)
      payload.off('end', onEnd)
      payload.off('error', onError)
      payload.off('close', onClose)
      chunks.length = 0
      let error = err
      let value: unknown
      if (error === null) {
        try {
          value = parseJsonBody(text ?? '', maxDepth)
        } catch (parseErr) {
          error = parseErr as Error
        }
      }
      // Held until parsed: the text and the parse are the memory this budget is about.
      budget.release(owner, received)
      done(error, value)
    }
    const refuse = (err: GatewayError): void => {
      // The rest of the body is not read: the error answer closes the connection (app.ts).
      payload.pause()
      finish(err)
    }
    function onData(chunk: Buffer): void {
      if (received + chunk.length > bodyLimit) return refuse(tooLarge(bodyLimit))
      const taken = budget.take(owner, chunk.length)
      if (taken === 'account') return refuse(shareExceeded(budget))
      if (taken === 'full') {
        return refuse(
          new GatewayError('server_busy', 'the gateway is receiving too many request bodies; retry shortly', {
            headers: { 'retry-after': '1' },
            retryable: true,
          }),
        )
      }
      received += chunk.length
      chunks.push(chunk)
    }
    function onEnd(): void {
      finish(null, Buffer.concat(chunks, received).toString('utf8'))
    }
    function onError(err: Error): void {
      finish(err)
    }
    function onClose(): void {
      finish(new Error('the client closed the connection before the body was complete'))
    }
    payload.on('data', onData)
    payload.on('end', onEnd)
    payload.on('error', onError)
    payload.on('close', onClose)
    payload.resume()
  }
}

/** 429 for an account holding its whole share of the body budget (its own limit, not the gateway's). */
export function shareExceeded(budget: BodyBudget): GatewayError {
  return new GatewayError(
    'rate_limit_exceeded',
    `this account is sending more request bodies at once than its share of the gateway (${budget.perAccountBytes} bytes); retry shortly`,
    { headers: { 'retry-after': '1', 'x-ratelimit-scope': 'account-bodies' } },
  )
}

function tooLarge(bodyLimit: number): GatewayError {
  return new GatewayError('payload_too_large', `request body is larger than ${bodyLimit} bytes`)
}

/**
 * The body's value: 400 `invalid_json` when empty or not JSON, 400 `too_deep` (param: where) when it
 * nests deeper than `maxDepth`, 400 `invalid_value` for a `__proto__` key or a `constructor.prototype`
 * (Fastify's default protection against prototype poisoning, kept).
 */
export function parseJsonBody(text: string, maxDepth: number): unknown {
  // A UTF-8 byte order mark is not JSON, but clients send it.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
  if (text.length === 0) {
    throw invalidRequest('invalid_json', 'request body is empty but content-type is application/json')
  }
  const scan = scanJson(text, maxDepth)
  if (scan.tooDeep !== null) {
    const where = formatDeepPath(scan.tooDeep)
    throw invalidRequest(
      'too_deep',
      `request body nests objects and arrays deeper than ${maxDepth} levels${where === null ? '' : ` at ${where}`}`,
      where,
    )
  }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    throw invalidRequest('invalid_json', 'request body is not valid JSON')
  }
  if (scan.suspectKeys) refusePoisonedKeys(value)
  return value
}

export interface JsonScan {
  /** Path segments of the first object or array deeper than the limit; null if none is. */
  tooDeep: (string | number)[] | null
  /** A key `__proto__` or `constructor` occurs. */
  suspectKeys: boolean
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const COLON = 0x3a
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d

/**
 * One pass over the JSON text, with no recursion and nothing built: JSON.parse itself copes with any
 * depth, but a 10 MB body of `[` builds 5 million arrays (hundreds of MB, seconds of CPU) first.
 * Invalid JSON is not reported here; JSON.parse does that next.
 */
export function scanJson(text: string, maxDepth: number): JsonScan {
  // For each open container: the index of the element being read (arrays), or where the current
  // key's string starts in the text (objects; -1 before the first key).
  const position: number[] = []
  const isObject: boolean[] = []
  let expectKey = false
  let suspectKeys = false
  const n = text.length
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c === QUOTE) {
      const end = endOfString(text, i)
      if (expectKey) {
        position[position.length - 1] = i
        expectKey = false
        const key = decodeKey(text, i, end)
        if (key === '__proto__' || key === 'constructor') suspectKeys = true
      }
      i = end
    } else if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (position.length >= maxDepth) {
        return { tooDeep: position.map((p, d) => (isObject[d] ? decodeKey(text, p) : p)), suspectKeys }
      }
      const object = c === OPEN_OBJECT
      isObject.push(object)
      position.push(object ? -1 : 0)
      expectKey = object
    } else if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      isObject.pop()
      position.pop()
      expectKey = false
    } else if (c === COMMA) {
      const top = position.length - 1
      if (top >= 0) {
        if (isObject[top]) expectKey = true
        else position[top]!++
      }
    } else if (c === COLON) {
      expectKey = false
    }
  }
  return { tooDeep: null, suspectKeys }
}

/** Index of the quote closing the string that opens at `start`, or the text's length. */
function endOfString(text: string, start: number): number {
  let j = start + 1
  for (;;) {
    j = text.indexOf('"', j)
    if (j === -1) return text.length
    let backslashes = 0
    while (text.charCodeAt(j - 1 - backslashes) === BACKSLASH) backslashes++
    if (backslashes % 2 === 0) return j
    j++
  }
}

/** The key whose string starts at `start` (ends at `end`, found if not given), escapes decoded. */
function decodeKey(text: string, start: number, end = endOfString(text, start)): string {
  if (start < 0) return ''
  const raw = text.slice(start + 1, end)
  if (!raw.includes('\\')) return raw
  try {
    return JSON.parse(`"${raw}"`) as string
  } catch {
    return raw
  }
}

const MAX_PATH_SEGMENTS = 8
const MAX_KEY_LENGTH = 40

/** `tools[0].function.parameters.properties.a.…`: the first segments, each key cut short. */
export function formatDeepPath(segments: readonly (string | number)[]): string | null {
  const kept = segments
    .slice(0, MAX_PATH_SEGMENTS)
    .map((s) => (typeof s === 'string' && s.length > MAX_KEY_LENGTH ? `${s.slice(0, MAX_KEY_LENGTH)}…` : s))
  const path = formatPath(kept)
  if (segments.length <= MAX_PATH_SEGMENTS) return path
  return path === null ? '…' : `${path}.…`
}

interface Node {
  value: unknown
  key: string | number | null
  parent: Node | null
}

/** Where a parsed value has a `__proto__` key or a `constructor` with a `prototype`: a 400 naming it. */
function refusePoisonedKeys(root: unknown): void {
  const own = (o: object, key: string): boolean => Object.prototype.hasOwnProperty.call(o, key)
  const stack: Node[] = [{ value: root, key: null, parent: null }]
  for (let node = stack.pop(); node !== undefined; node = stack.pop()) {
    const value = node.value
    if (typeof value !== 'object' || value === null) continue
    if (Array.isArray(value)) {
      value.forEach((v, i) => stack.push({ value: v, key: i, parent: node }))
      continue
    }
    const ctor: unknown = own(value, 'constructor') ? (value as Record<string, unknown>).constructor : null
    const poisoned = own(value, '__proto__')
      ? '__proto__'
      : typeof ctor === 'object' && ctor !== null && own(ctor, 'prototype')
        ? 'constructor'
        : null
    if (poisoned !== null) {
      const path: (string | number)[] = [poisoned]
      for (let n: Node | null = node; n !== null && n.key !== null; n = n.parent) path.unshift(n.key)
      const where = formatDeepPath(path)
      throw invalidRequest('invalid_value', `${where}: the key "${poisoned}" is not accepted`, where)
    }
    for (const [k, v] of Object.entries(value)) stack.push({ value: v, key: k, parent: node })
  }
}

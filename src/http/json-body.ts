import type { FastifyRequest } from 'fastify'
import type { IncomingMessage } from 'node:http'
import { GatewayError, formatPath, invalidRequest } from '../errors.ts'
import { finishInTurns, finishNow, type Sliced, type TurnOptions } from '../turns.ts'

// The one JSON body parser: reads the body under the body limit and the shared byte budget, then
// parses it in slices (a turn of the event loop every few milliseconds), refusing too-deep nesting and
// too-wide objects before building them. It replaces Fastify's parser, so
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
      // Held until parsed: the text and the parse are the memory this budget is about.
      const settle = (error: Error | null, value?: unknown): void => {
        budget.release(owner, received)
        done(error, value)
      }
      if (err !== null) return settle(err)
      parseJsonBodyInTurns(text ?? '', { maxDepth }).then(
        (value) => settle(null, value),
        (parseErr: unknown) => settle(parseErr as Error),
      )
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

/** Most keys one object of a body may have (400 naming the object past it): far above real use. */
export const MAX_OBJECT_KEYS = 10_000

/**
 * Most objects and arrays one body may hold, all levels together (400 past it). Each is an allocation
 * the garbage collector then walks, which no slicing spreads out: 300 000 of them (100 000 tools) cost
 * a 90 ms pause. Real requests hold a few thousand; the per-field caps of a chat request (10 000
 * messages, parts and tool calls, 1 024 tools) stay below it with room for tool schemas.
 */
export const MAX_CONTAINERS = 100_000

/**
 * Most items one array of a body may hold (400 naming it past it): the longest list any endpoint takes
 * is 300 000 embedding tokens. 3 000 000 numbers in one array (6 MB) cost 50-75 ms of CPU in one
 * go to grow and collect, however the parse is sliced.
 */
export const MAX_ARRAY_ITEMS = 300_000

export interface JsonLimits {
  /** Deepest nesting of objects and arrays (400 `too_deep` past it). */
  maxDepth: number
  /** Most keys in one object (400 `invalid_value` past it). */
  maxKeys?: number
  /** Most objects and arrays in the body (400 `invalid_value` past it). */
  maxContainers?: number
  /** Most items in one array (400 `invalid_value` past it). */
  maxItems?: number
}

/**
 * The body's value: 400 `invalid_json` when empty or not JSON, 400 `too_deep` (param: where) when it
 * nests deeper than `maxDepth`, 400 `invalid_value` (param: the object) for an object of more than
 * `maxKeys` keys or an array of more than `maxItems` items, (param: the top-level field) past
 * `maxContainers` objects and arrays, and for a `__proto__` key or a `constructor.prototype` (Fastify's default protection
 * against prototype poisoning, kept). All at once: for tests and small texts.
 */
export function parseJsonBody(
  text: string,
  maxDepth: number,
  more: Omit<JsonLimits, 'maxDepth'> = {},
): unknown {
  return finishNow(parseJsonSteps(text, { maxDepth, ...more }))
}

/** As {@link parseJsonBody}, giving the event loop a turn every few milliseconds of parsing. */
export function parseJsonBodyInTurns(
  text: string,
  limits: JsonLimits,
  turns?: TurnOptions,
): Promise<unknown> {
  const native = parseSmall(text, limits)
  if (native !== NOT_PARSED) return Promise.resolve(native)
  return finishInTurns(parseJsonSteps(text, limits), turns)
}

/**
 * Bodies up to this many characters are parsed by JSON.parse, at most a few milliseconds, and 10×
 * faster than the sliced parser on the everyday kilobyte body; the value is then checked against the
 * same limits. A bigger body, or one that is not valid JSON or passes a limit, goes through the sliced
 * parser, which gives the exact error.
 */
export const NATIVE_PARSE_MAX_CHARS = 256 * 1024

const NOT_PARSED: unique symbol = Symbol('not parsed')

function parseSmall(text: string, limits: JsonLimits): unknown {
  if (text.length > NATIVE_PARSE_MAX_CHARS || text.charCodeAt(0) === 0xfeff) return NOT_PARSED
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return NOT_PARSED
  }
  return withinLimits(value, limits) ? value : NOT_PARSED
}

/** Whether a parsed value keeps every limit the sliced parser checks (depth counted as it does). */
export function withinLimits(root: unknown, limits: JsonLimits): boolean {
  const maxKeys = limits.maxKeys ?? MAX_OBJECT_KEYS
  const maxContainers = limits.maxContainers ?? MAX_CONTAINERS
  const maxItems = limits.maxItems ?? MAX_ARRAY_ITEMS
  let containers = 0
  const values: unknown[] = [root]
  const depths: number[] = [1]
  while (values.length > 0) {
    const value = values.pop()
    const depth = depths.pop() as number
    if (typeof value !== 'object' || value === null) continue
    if (depth > limits.maxDepth || ++containers > maxContainers) return false
    if (Array.isArray(value)) {
      if (value.length > maxItems) return false
      for (const item of value) {
        if (typeof item === 'object' && item !== null) {
          values.push(item)
          depths.push(depth + 1)
        }
      }
      continue
    }
    const record = value as Record<string, unknown>
    const keys = Object.keys(record)
    if (keys.length > maxKeys) return false
    for (const key of keys) {
      const item = record[key]
      if (key === '__proto__' || (key === 'constructor' && hasOwnPrototype(item))) return false
      if (typeof item === 'object' && item !== null) {
        values.push(item)
        depths.push(depth + 1)
      }
    }
  }
  return true
}

const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const COLON = 0x3a
const OPEN_OBJECT = 0x7b
const CLOSE_OBJECT = 0x7d
const OPEN_ARRAY = 0x5b
const CLOSE_ARRAY = 0x5d

/** Values parsed between two checkpoints. */
export const VALUES_PER_CHECKPOINT = 1024

interface Frame {
  value: Record<string, unknown> | unknown[]
  isArray: boolean
  /** Objects: the key whose value is being read. */
  key: string
  keys: number
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y
// JSON forbids them unescaped inside strings.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f]/

/**
 * JSON.parse is one synchronous call: 600 000 keys or a million small objects in 10 MB took a quarter
 * of a second of it (measured with bench/loop-stall.ts). This parser builds the same value in one
 * pass, with no recursion, checking the limits as it goes (nothing past a limit is built) and yielding
 * at a checkpoint every {@link VALUES_PER_CHECKPOINT} values. Strings and numbers are still decoded
 * natively (JSON.parse of the string's text, Number of the number's).
 */
export function* parseJsonSteps(text: string, limits: JsonLimits): Sliced<unknown> {
  const { maxDepth } = limits
  const maxKeys = limits.maxKeys ?? MAX_OBJECT_KEYS
  const maxContainers = limits.maxContainers ?? MAX_CONTAINERS
  const maxItems = limits.maxItems ?? MAX_ARRAY_ITEMS
  let containers = 0
  // A UTF-8 byte order mark is not JSON, but clients send it.
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
  if (text.length === 0) {
    throw invalidRequest('invalid_json', 'request body is empty but content-type is application/json')
  }
  const stack: Frame[] = []
  const path = (): (string | number)[] =>
    stack.map((f) => (f.isArray ? (f.value as unknown[]).length : f.key))
  let units = 0
  let i = skipSpace(text, 0)

  /** Reads `"key":` at i into the frame; returns the index of its value. */
  const readKey = (frame: Frame, at: number): number => {
    if (text.charCodeAt(at) !== QUOTE) throw invalidJson()
    const end = endOfString(text, at)
    frame.key = decodeString(text, at, end)
    if (frame.key === '__proto__') throw poisoned(path())
    if (++frame.keys > maxKeys) {
      const where = formatDeepPath(path().slice(0, -1))
      throw invalidRequest('invalid_value', `${where ?? 'the body'} has more than ${maxKeys} keys`, where)
    }
    const colon = skipSpace(text, end + 1)
    if (text.charCodeAt(colon) !== COLON) throw invalidJson()
    return skipSpace(text, colon + 1)
  }

  for (;;) {
    if (++units >= VALUES_PER_CHECKPOINT) {
      units = 0
      yield
    }
    // A value starts at i: open a container (and go on to its first member), or read a leaf.
    let value: unknown
    const c = text.charCodeAt(i)
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (stack.length >= maxDepth) {
        const where = formatDeepPath(path())
        throw invalidRequest(
          'too_deep',
          `request body nests objects and arrays deeper than ${maxDepth} levels${where === null ? '' : ` at ${where}`}`,
          where,
        )
      }
      if (++containers > maxContainers) {
        // Named by the top-level field it is in: the deep place of the last one says little.
        const where = formatDeepPath(path().slice(0, 1))
        throw invalidRequest(
          'invalid_value',
          `request body holds more than ${maxContainers} objects and arrays${where === null ? '' : ` (past it in ${where})`}`,
          where,
        )
      }
      const isArray = c === OPEN_ARRAY
      const frame: Frame = { value: isArray ? [] : {}, isArray, key: '', keys: 0 }
      i = skipSpace(text, i + 1)
      if (text.charCodeAt(i) !== (isArray ? CLOSE_ARRAY : CLOSE_OBJECT)) {
        stack.push(frame)
        if (!isArray) i = readKey(frame, i)
        continue
      }
      i++
      value = frame.value
    } else if (c === QUOTE) {
      const end = endOfString(text, i)
      value = decodeString(text, i, end)
      i = end + 1
    } else {
      NUMBER.lastIndex = i
      const number = NUMBER.exec(text)
      if (number !== null) {
        value = Number(number[0])
        i += number[0].length
      } else if (text.startsWith('true', i)) {
        value = true
        i += 4
      } else if (text.startsWith('false', i)) {
        value = false
        i += 5
      } else if (text.startsWith('null', i)) {
        value = null
        i += 4
      } else throw invalidJson()
    }
    // Hand the value to its container; close each container that ends here.
    for (;;) {
      const top = stack.at(-1)
      if (top === undefined) {
        if (skipSpace(text, i) !== text.length) throw invalidJson()
        return value
      }
      if (top.isArray) (top.value as unknown[]).push(value)
      else {
        if (top.key === 'constructor' && hasOwnPrototype(value)) throw poisoned(path())
        ;(top.value as Record<string, unknown>)[top.key] = value
      }
      i = skipSpace(text, i)
      const next = text.charCodeAt(i)
      if (next === COMMA) {
        i = skipSpace(text, i + 1)
        if (!top.isArray) i = readKey(top, i)
        else if ((top.value as unknown[]).length >= maxItems) {
          const where = formatDeepPath(path().slice(0, -1))
          throw invalidRequest(
            'invalid_value',
            `${where ?? 'the body'} has more than ${maxItems} items`,
            where,
          )
        }
        break
      }
      if (next !== (top.isArray ? CLOSE_ARRAY : CLOSE_OBJECT)) throw invalidJson()
      i++
      stack.pop()
      value = top.value
    }
  }
}

function invalidJson(): GatewayError {
  return invalidRequest('invalid_json', 'request body is not valid JSON')
}

function poisoned(segments: (string | number)[]): GatewayError {
  const where = formatDeepPath(segments)
  const key = segments.at(-1)
  return invalidRequest('invalid_value', `${where}: the key "${key}" is not accepted`, where)
}

function hasOwnPrototype(value: unknown): boolean {
  return (
    typeof value === 'object' && value !== null && Object.prototype.hasOwnProperty.call(value, 'prototype')
  )
}

/** Index of the first character at or after i that is not JSON whitespace. */
function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i)
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i
    i++
  }
}

/** The string whose quotes are at `start` and `end`; natively decoded when it has escapes. */
function decodeString(text: string, start: number, end: number): string {
  if (end >= text.length) throw invalidJson()
  const raw = text.slice(start + 1, end)
  if (!raw.includes('\\') && !CONTROL.test(raw)) return raw
  try {
    return JSON.parse(text.slice(start, end + 1)) as string
  } catch {
    throw invalidJson()
  }
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

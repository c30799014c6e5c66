import type { ChatMessage, ChatRequest, EmbeddingsRequest } from '../providers/types.ts'
import { finishInTurns, finishNow, type Sliced } from '../turns.ts'

// Two kinds of counting. Before a request: a cheap, safe upper bound (no tokenizer on the hot path).
// After a request whose upstream gave no usage: a real tokenizer (o200k_base, loaded on first use).

/** Images cost at most this many prompt tokens at the providers we know (high detail, large tile counts). */
const IMAGE_TOKEN_BOUND = 2_000
/** Role markers and separators per message. */
const MESSAGE_OVERHEAD = 8

/**
 * Every BPE token covers at least one UTF-8 byte, so the byte length bounds the token count. At once:
 * for tests and small requests; the pipeline uses {@link promptTokenBoundInTurns}.
 */
export function promptTokenBound(req: ChatRequest): number {
  return finishNow(promptTokenBoundSteps(req))
}

/** {@link promptTokenBound}, giving the event loop a turn every few ms (10 MB of tools, 10 000 messages). */
export function promptTokenBoundInTurns(req: ChatRequest): Promise<number> {
  return finishInTurns(promptTokenBoundSteps(req))
}

/** Messages or tools measured between two checkpoints. */
const ITEMS_PER_CHECKPOINT = 64

/** The bound, with a checkpoint every {@link ITEMS_PER_CHECKPOINT} messages, tools and long items. */
export function* promptTokenBoundSteps(req: ChatRequest): Sliced<number> {
  let bound = 0
  let items = 0
  for (const m of req.messages) {
    bound += MESSAGE_OVERHEAD + messageBound(m)
    if (++items % ITEMS_PER_CHECKPOINT === 0) yield
  }
  if (req.tools) {
    // The bytes of JSON.stringify(req.tools), a tool at a time: all at once, 10 MB of tool schemas
    // is a long stall. Brackets and commas: 2 + (n - 1).
    bound += 1 + Math.max(1, req.tools.length)
    for (const tool of req.tools) {
      bound += Buffer.byteLength(JSON.stringify(tool))
      if (++items % ITEMS_PER_CHECKPOINT === 0) yield
    }
  }
  if (req.response_format) bound += Buffer.byteLength(JSON.stringify(req.response_format))
  return bound
}

function messageBound(m: ChatMessage): number {
  let bound = 0
  if (typeof m.content === 'string') bound += Buffer.byteLength(m.content)
  else if (Array.isArray(m.content)) {
    for (const part of m.content) {
      if (part.type === 'text' && typeof part.text === 'string') bound += Buffer.byteLength(part.text)
      else if (part.type === 'image_url') bound += IMAGE_TOKEN_BOUND
      else bound += Buffer.byteLength(JSON.stringify(part))
    }
  }
  if (m.tool_calls) bound += Buffer.byteLength(JSON.stringify(m.tool_calls))
  if (typeof m.reasoning === 'string') bound += Buffer.byteLength(m.reasoning)
  return bound
}

export function embeddingTokenBound(req: EmbeddingsRequest): number {
  const inputs = Array.isArray(req.input) ? req.input : [req.input]
  let bound = 0
  for (const i of inputs)
    bound += typeof i === 'string' ? Buffer.byteLength(i) : Array.isArray(i) ? i.length : 1
  return bound
}

/** The text of a chat prompt as a tokenizer should see it, for estimated usage. At once (tests). */
export function promptText(req: ChatRequest): string {
  return finishNow(promptTextSteps(req))
}

/** {@link promptText}, giving the event loop a turn every few ms. */
export function promptTextInTurns(req: ChatRequest): Promise<string> {
  return finishInTurns(promptTextSteps(req))
}

export function* promptTextSteps(req: ChatRequest): Sliced<string> {
  const parts: string[] = []
  let items = 0
  for (const m of req.messages) {
    parts.push(m.role)
    if (typeof m.content === 'string') parts.push(m.content)
    else if (Array.isArray(m.content)) {
      for (const p of m.content) if (p.type === 'text' && typeof p.text === 'string') parts.push(p.text)
    }
    if (m.tool_calls) parts.push(JSON.stringify(m.tool_calls))
    if (++items % ITEMS_PER_CHECKPOINT === 0) yield
  }
  if (req.tools) {
    // The same text as JSON.stringify(req.tools), a tool at a time.
    const tools: string[] = []
    for (const tool of req.tools) {
      tools.push(JSON.stringify(tool))
      if (++items % ITEMS_PER_CHECKPOINT === 0) yield
    }
    parts.push(`[${tools.join(',')}]`)
  }
  return parts.join('\n')
}

export function imagePartCount(req: ChatRequest): number {
  let count = 0
  for (const m of req.messages) {
    if (Array.isArray(m.content)) for (const p of m.content) if (p.type === 'image_url') count++
  }
  return count
}

export type TokenCounter = (text: string) => Promise<number>

type CountSync = (text: string) => number

/**
 * Text that looks like a special token (`<|endoftext|>`) is counted as the plain text it is, as upstreams
 * treat it in a prompt; gpt-tokenizer's default throws on it, which would leave the request unbilled.
 */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() }

/**
 * gpt-tokenizer remembers the tokens of up to 100 000 pieces it had to merge: with pieces of up to
 * {@link PIECE_CAP} characters of random text that grew to ≈100 MB. Ordinary text needs far fewer.
 */
const MERGE_CACHE_SIZE = 10_000

let counter: Promise<CountSync> | undefined

/**
 * Loads gpt-tokenizer's o200k_base encoding (≈0.2 s, ≈80 MB) once. server.ts calls it before listening,
 * so the first cut or cancelled stream does not stall the event loop loading it.
 */
export function loadCounter(): Promise<CountSync> {
  counter ??= import('gpt-tokenizer/encoding/o200k_base').then((m) => {
    m.setMergeCacheSize(MERGE_CACHE_SIZE)
    return (text) => m.countTokens(text, PLAIN_TEXT)
  })
  return counter
}

// The tokenizer's byte-pair merge is quadratic in the length of one pre-token, and a run without spaces
// (random letters, DNA) is one pre-token: 100 KB of it took 3 s on the main thread, 400 KB a minute.
// Runs are cut at PIECE_CAP, so the cost is linear: at worst (random CJK) ≈2.5 µs a character, ordinary
// text ≈0.07 µs. The tokenizer gets at most PIECE_TEXT (+ PIECE_CAP) characters in one call, and the
// event loop gets a turn after COUNT_SLICE characters or TURN_MS of counting, whichever comes first.

/** The longest run of text without a split the tokenizer sees. */
export const PIECE_CAP = 128
/** Text handed to the tokenizer in one call (≈2.5 ms at worst). */
export const PIECE_TEXT = 1024
/** Text counted between two turns of the event loop, at most. */
export const COUNT_SLICE = 16 * 1024
/** Counting time between two turns of the event loop, at most (plus one call). */
const TURN_MS = 2

/**
 * Counts tokens with o200k_base, linear in the text and yielding to the event loop as it goes, so no
 * estimate stalls other requests. Exact for ordinary text (see {@link countingPieces}); may over-count
 * long unbroken runs by a fraction of a token per {@link PIECE_CAP} characters.
 */
export const countTokens: TokenCounter = async (text) => {
  const count = await loadCounter()
  let total = 0
  let sinceYield = 0
  let turnStart = performance.now()
  for (const piece of countingPieces(text)) {
    total += count(piece)
    sinceYield += piece.length
    if (sinceYield >= COUNT_SLICE || performance.now() - turnStart >= TURN_MS) {
      await new Promise((resolve) => setImmediate(resolve))
      sinceYield = 0
      turnStart = performance.now()
    }
  }
  return total
}

/**
 * Cuts text, in one linear pass, into pieces the tokenizer can count one by one: the pieces join back to
 * the text, none is longer than `size + cap`, and no pre-token inside a piece is longer than `cap + 1`.
 *
 * Most cuts fall where o200k's own pre-tokenizer splits (see {@link isSafeCut}); there the counts of the
 * pieces add up exactly to the count of the whole. A run longer than `cap` with no such place (random
 * letters, DNA, a long run of spaces) is cut every `cap` characters, which can change the count by about
 * one token per cut (random letters: +0.2 %).
 */
export function* countingPieces(text: string, cap = PIECE_CAP, size = PIECE_TEXT): Generator<string> {
  let start = 0 // of the piece being built
  let run = 0 // start of the run after the last cut
  let i = 1
  while (i < text.length) {
    let cut = i
    let hard = false
    if (i - run > cap) {
      // A run too long for one pre-token: cut it where o200k would if the last half of the cap has such
      // a place, else cut it hard and end the piece there, so the two sides are counted apart.
      cut = run + cap
      while (cut > run + cap / 2 && !isSafeCut(text, cut)) cut--
      if (cut <= run + cap / 2) {
        hard = true
        cut = isLowSurrogate(text.charCodeAt(run + cap)) ? run + cap - 1 : run + cap
      }
    } else if (!isSpaceCut(text, i)) {
      i++
      continue
    }
    if (hard || cut - start >= size) {
      yield text.slice(start, cut)
      start = cut
    }
    run = cut
    if (cut === i) i++ // else i has not been looked at since the run was found too long
  }
  if (start < text.length) yield text.slice(start)
}

// Where o200k's pre-tokenizer always splits. Its pattern, in gpt-tokenizer/esm/encodingParams/constants.js:
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(contraction)?
//   | [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(contraction)?
//   | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// A pre-token holds whitespace other than \r\n only as its first character or among whitespace, a letter
// only in a run of letters and marks ended by a contraction (`'s`) or anything else, a digit only among
// digits. The character before a cut must not be whitespace: `\s+(?!\S)` looks past what it matches.

/** Before a space or tab that follows a non-space: the split before each word of ordinary text. */
function isSpaceCut(text: string, i: number): boolean {
  const c = text.charCodeAt(i)
  return (c === 0x20 || c === 0x09) && !isWhitespace(text.charCodeAt(i - 1))
}

/**
 * Any split o200k always makes, for runs without spaces (code, URLs, CJK with punctuation). A space or
 * tab after a non-space is never asked about: countingPieces has cut there already ({@link isSpaceCut}).
 */
function isSafeCut(text: string, i: number): boolean {
  const c = text.charCodeAt(i)
  if (isLowSurrogate(c)) return false
  // At i = 1 after a lone low surrogate this reads position -1, 0: no whitespace, letter or digit either.
  const before = text.codePointAt(isLowSurrogate(text.charCodeAt(i - 1)) ? i - 2 : i - 1) ?? 0
  if (isWhitespace(before)) return false
  const cp = text.codePointAt(i) ?? 0
  if (isNumber(before) !== isNumber(cp)) return true
  // A mark (U+0301) is no letter here: o200k's punctuation class takes it too.
  return isLetter(before) && !isLetterOrMark(cp) && cp !== 0x27 // 0x27: the apostrophe of a contraction
}

function isLowSurrogate(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff
}

/** `\s` of a JavaScript regular expression. */
function isWhitespace(c: number): boolean {
  if (c < 0x80) return c === 0x20 || (c >= 0x09 && c <= 0x0d)
  return (
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000 ||
    c === 0xfeff
  )
}

// Each is tested on the one code point of String.fromCodePoint: no anchors needed.
const LETTER = /\p{L}/u
const LETTER_OR_MARK = /[\p{L}\p{M}]/u
const NUMBER = /\p{N}/u

function isLetter(cp: number): boolean {
  if (cp < 0x80) return (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a)
  return LETTER.test(String.fromCodePoint(cp))
}

function isLetterOrMark(cp: number): boolean {
  if (cp < 0x80) return (cp >= 0x41 && cp <= 0x5a) || (cp >= 0x61 && cp <= 0x7a)
  return LETTER_OR_MARK.test(String.fromCodePoint(cp))
}

function isNumber(cp: number): boolean {
  if (cp < 0x80) return cp >= 0x30 && cp <= 0x39
  return NUMBER.test(String.fromCodePoint(cp))
}

/** Text held before it is handed to the counter, at most (a stream's text is counted in such batches). */
export const TALLY_BATCH = 64 * 1024

/**
 * A stream's output tokens against a limit, counted as the text arrives. Each token is at least one
 * UTF-8 byte, so the tokens counted plus the bytes not yet counted bound the total: text is only held
 * until that bound could pass the limit (or {@link TALLY_BATCH} characters are held), then counted. A
 * stream well under its limit is counted once, at its end; every character is counted once whatever
 * the stream's length, and at most the limit's worth of bytes, or one batch, is held.
 */
export interface TokenMeter {
  /** Takes the next piece of the stream. */
  add(text: string): void
  /** True when the text held must be counted (`exceeded`) to know whether the limit is passed. */
  needsCount(): boolean
  /** Counts the text held; true when the tokens so far are more than the limit. */
  exceeded(): Promise<boolean>
  /** The tokens of everything added. */
  total(): Promise<number>
}

export function createTokenMeter(limit: number, count: TokenCounter = countTokens): TokenMeter {
  let held: string[] = []
  let heldLength = 0
  let heldBytes = 0
  let tokens = 0
  async function flush(): Promise<void> {
    if (heldLength === 0) return
    const text = held.join('')
    const bytes = heldBytes
    held = []
    heldLength = 0
    heldBytes = 0
    // A failing counter must neither end the stream nor skip the charge: bytes/4 stands in.
    tokens += await count(text).catch(() => Math.ceil(bytes / 4))
  }
  return {
    add(text) {
      if (text === '') return
      held.push(text)
      heldLength += text.length
      heldBytes += Buffer.byteLength(text)
    },
    needsCount: () => tokens + heldBytes > limit || heldLength >= TALLY_BATCH,
    async exceeded() {
      await flush()
      return tokens > limit
    },
    async total() {
      await flush()
      return tokens
    },
  }
}

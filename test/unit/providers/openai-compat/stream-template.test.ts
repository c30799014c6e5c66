import { readFileSync } from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createChunkSerialiser } from '../../../../src/inference/chunk-text.ts'
import { createLogger } from '../../../../src/logger.ts'
import { createOpenAICompatAdapter } from '../../../../src/providers/openai-compat/adapter.ts'
import { CHUNK_TEXT, type ChunkText } from '../../../../src/providers/shared/stream.ts'
import type { ChatChunk } from '../../../../src/domain/chat.ts'
import type { ChatRequest, UpstreamCall } from '../../../../src/providers/types.ts'
import { startFakeUpstream, type FakeUpstream } from '../../../support/fake-upstream.ts'

// The stream's fast path (stream-template.ts, inference/chunk-text.ts) against the slow one: the same
// upstream bytes through the adapter with its templates and through the adapter without them, then
// the relay's rewrites, then the Chat Completions text. The two must be the same, byte for byte: on
// the recorded fixtures, and on streams made from them whose events the templates must refuse (spaces,
// unusual escapes, a changing id, a missing `created`) or take (quotes, escapes, any Unicode).

const fixture = (name: string) =>
  readFileSync(new URL(`../../../fixtures/openai-compat/${name}`, import.meta.url), 'utf8')

/** A recorded stream's data lines (without `data: `), [DONE] included. */
const dataOf = (sse: string): string[] =>
  sse
    .split('\n\n')
    .map((e) => e.replace(/^data: /, ''))
    .filter((e) => e.trim() !== '')

const text = dataOf(fixture('text.sse'))
const contentEvent = text[1]!
/** The recorded content event with another content, written as `literal` (a JSON string's text). */
const withContent = (literal: string, event = contentEvent): string =>
  event.replace('"content":"Hello"', `"content":${literal}`)

const contents = [
  'Hello',
  ' world',
  '',
  'a "quoted" word',
  'back\\slash',
  'line\nbreak\r\n\ttab',
  'é ü 中文 😀',
  '\u2028\u2029',
  'x/y </script>',
  '\u0001\u001f',
  ', "content": "x"',
  '"content":"Hello"',
]

/** The fixture's stream with many content events between its first and its last ones. */
const longStream = (events: string[]): string[] => [text[0]!, ...events, ...text.slice(2)]

const streams: Record<string, string[]> = {
  'text.sse': text,
  'deepseek-reasoning.sse': dataOf(fixture('deepseek-reasoning.sse')),
  'content of every kind': longStream(contents.map((c) => withContent(JSON.stringify(c)))),
  'unusual escapes (\\u, \\/)': longStream([
    withContent('"a"'),
    withContent('"\\u00e9t\\u00e9"'),
    withContent('"b"'),
    withContent('"x\\/y"'),
    withContent('"\\uD83D\\uDE00"'),
    withContent('"c"'),
  ]),
  'spaces after colons and commas': longStream([
    withContent('"a"'),
    withContent('"b"').replace(/":/g, '": ').replace(/,"/g, ', "'),
    withContent('"c"').replace(/":/g, '": '),
    withContent('"d"'),
  ]),
  'an id that changes': longStream([
    withContent('"a"'),
    withContent('"b"').replace('chatcmpl-123', 'chatcmpl-124'),
    withContent('"c"').replace('chatcmpl-123', 'chatcmpl-125'),
  ]),
  'no created': longStream(
    ['"a"', '"b"', '"c"'].map((c) => withContent(c).replace('"created":1694268190,', '')),
  ),
  'a finish_reason on a content event': longStream([
    withContent('"a"'),
    withContent('"b"').replace('"finish_reason":null', '"finish_reason":"eos"'),
    withContent('"c"').replace('"finish_reason":null', '"finish_reason":"eos"'),
  ]),
  'usage on every event': longStream(
    ['"a"', '"b"', '"c"'].map((c) =>
      withContent(c).replace('"usage":null', '"usage":{"prompt_tokens":1,"total_tokens":2}'),
    ),
  ),
  'a __proto__ key': longStream(
    ['"a"', '"b"', '"c"'].map((c) =>
      withContent(c).replace('"logprobs":null', '"logprobs":null,"__proto__":{"x":1}'),
    ),
  ),
  'a string where the content was': longStream([
    withContent('"a"'),
    withContent('"b","extra":"x"'),
    withContent('"c"'),
    withContent('"d" '),
    withContent('"e"'),
  ]),
}

let upstream: FakeUpstream
let body = ''
beforeAll(async () => {
  upstream = await startFakeUpstream({
    'POST /v1/chat/completions': (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' })
      res.end(body)
    },
  })
})
afterAll(() => upstream.close())

const request: ChatRequest = {
  model: 'openai/gpt-4o-mini',
  messages: [{ role: 'user', content: 'hi' }],
  stream: true,
}

function callOf(): UpstreamCall {
  return {
    upstream: {
      name: 'openai',
      kind: 'openai-compat',
      baseUrl: `${upstream.origin}/v1`,
      headers: {},
      timeouts: { connectMs: 5_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: 5_000 },
      outputLimitField: 'max_tokens',
      retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
      maxResponseBytes: 1 << 20,
      latencyMs: 0,
    },
    upstreamModel: 'gpt-4o-mini',
    signal: new AbortController().signal,
    log: createLogger('silent'),
  }
}

/**
 * The text the client gets: the adapter's chunks with the relay's rewrites (inference/chat.ts: the
 * generation id, the slug, usage left out unless asked for), each serialised as writeSse does.
 */
async function clientText(
  data: string[],
  templates: boolean,
  includeUsage: boolean,
): Promise<{ text: string; spliced: number }> {
  body = data.map((d) => `data: ${d}\n\n`).join('')
  const adapter = createOpenAICompatAdapter(() => 1_700_000_000_000, { streamTemplates: templates })
  const serialise = templates ? createChunkSerialiser() : JSON.stringify
  let text = ''
  let spliced = 0
  for await (const batch of adapter.chatStream(request, callOf())) {
    for (const chunk of batch as ChatChunk[]) {
      chunk.id = 'gen_0123456789abcdef'
      chunk.model = 'openai/gpt-4o-mini'
      if (!includeUsage && 'usage' in chunk) {
        if (chunk.usage && chunk.choices.length === 0) continue
        chunk.usage = undefined
      }
      if ((chunk as ChunkText)[CHUNK_TEXT]) spliced++
      text += `data: ${serialise(chunk)}\n\n`
    }
  }
  return { text, spliced }
}

describe('the stream fast path (templates, splicing)', () => {
  for (const [name, data] of Object.entries(streams)) {
    for (const includeUsage of [false, true]) {
      it(`gives the slow path's bytes: ${name}${includeUsage ? ', usage asked for' : ''}`, async () => {
        const slow = await clientText(data, false, includeUsage)
        const fast = await clientText(data, true, includeUsage)
        expect(slow.spliced).toBe(0)
        expect(fast.text).toBe(slow.text)
      })
    }
  }

  it('takes the events of a plain stream from the template, after the first content event', async () => {
    const many = longStream(contents.map((c) => withContent(JSON.stringify(c))))
    const fast = await clientText(many, true, false)
    // The first content event teaches the template; every later one is spliced, but for a content
    // whose JSON text has a \u escape (control characters): taken as an unusual escape, to be safe.
    const unusual = contents.filter((c) => JSON.stringify(c).includes('\\u')).length
    expect(unusual).toBe(1)
    expect(fast.spliced).toBe(contents.length - 1 - unusual)
  })
})

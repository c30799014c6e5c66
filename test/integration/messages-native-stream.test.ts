import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import { createMemoryStore } from '../../src/store/memory/index.ts'
import type { Store } from '../../src/store/types.ts'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import { sseFile, startFakeUpstream, type FakeHandler } from '../support/fake-upstream.ts'
import { readFixture } from '../support/fixtures.ts'
import { devAuth, readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// A streamed /v1/messages answer from an Anthropic upstream is Anthropic's own event stream: server
// tool blocks, citations, pause_turn and events unknown to us arrive as Anthropic sent them, with only
// message_start's id and model made ours; billing, the output bound, settlement and aborts are the
// pipeline's as on every stream.

const UPSTREAM_KEY = 'sk-ant-api03-FAKE-test-key-0000000000'
const CLAUDE = 'anthropic/claude-sonnet-4-5'
const FIXTURE = 'anthropic/web-search-pause.sse'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function behind(routes: Record<string, FakeHandler>, store?: Store) {
  const fake = await startFakeUpstream(routes)
  const gw = await startGateway({
    env: { ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: fake.origin },
    listen: true,
    overrides: store ? { store } : undefined,
  })
  cleanups.push(
    () => fake.close(),
    () => gw.close(),
  )
  return { fake, gw, client: sdk(gw.origin, 'sk-dev') }
}

const sdk = (baseURL: string, apiKey: string) => new Anthropic({ baseURL, apiKey, maxRetries: 0 })

const webSearch = { type: 'web_search_20250305', name: 'web_search', max_uses: 2 } as const
const params = {
  model: CLAUDE,
  max_tokens: 1024,
  tools: [webSearch],
  messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }],
} as unknown as Anthropic.MessageCreateParamsStreaming

interface Sse {
  event: string
  data: { type: string; [k: string]: unknown }
}

function parseSse(text: string): Sse[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n')
      const event = lines.find((l) => l.startsWith('event: '))!.slice('event: '.length)
      const data = lines.find((l) => l.startsWith('data: '))!.slice('data: '.length)
      return { event, data: JSON.parse(data) as Sse['data'] }
    })
}

async function postStream(gw: TestGateway, body: unknown): Promise<Response> {
  return fetch(`${gw.origin}/v1/messages`, {
    method: 'POST',
    headers: { ...devAuth, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ ...(body as object), stream: true }),
  })
}

describe('/v1/messages streamed from an Anthropic upstream', () => {
  it("sends Anthropic's own events, every type, with only the message id and model made ours", async () => {
    const { gw } = await behind({ 'POST /v1/messages': sseFile(FIXTURE) })
    const res = await postStream(gw, params)
    expect(res.status).toBe(200)
    const id = res.headers.get('x-generation-id')!
    const got = parseSse(await res.text())
    const sent = parseSse(readFixture(FIXTURE))
    const start = sent[0]!.data as unknown as { message: Record<string, unknown> }
    const expected = [
      { event: 'message_start', data: { ...start, message: { ...start.message, id, model: CLAUDE } } },
      ...sent.slice(1),
    ]
    expect(got).toEqual(expected)
  })

  it('messages.stream().finalMessage() equals what Anthropic sent: server tools, citations, pause_turn', async () => {
    // What the SDK makes of the upstream's stream read directly, and of the gateway's.
    const upstream = await startFakeUpstream({ 'POST /v1/messages': sseFile(FIXTURE) })
    cleanups.push(() => upstream.close())
    const direct = await sdk(upstream.origin, UPSTREAM_KEY)
      .messages.stream({ ...params, model: 'claude-sonnet-4-5' })
      .finalMessage()
    expect(direct.content.map((b) => b.type)).toEqual([
      'text',
      'server_tool_use',
      'web_search_tool_result',
      'text',
      'server_tool_use',
    ])

    const { gw, client } = await behind({ 'POST /v1/messages': sseFile(FIXTURE) })
    const message = await client.messages.stream(params).finalMessage()
    expect(message.id).toMatch(/^gen-/)
    expect(message).toEqual({ ...direct, id: message.id, model: CLAUDE })
    expect(message.stop_reason).toBe('pause_turn')
    expect(message.usage.server_tool_use).toEqual({ web_search_requests: 1 })

    // Billed from message_delta's cumulative usage (replaced, not added to message_start's).
    const record = await readGeneration(gw, message.id)
    expect(record).toMatchObject({
      api: '/v1/messages',
      streamed: true,
      cancelled: false,
      cost_source: 'upstream',
      usage: { prompt_tokens: 10682, completion_tokens: 510 },
    })
    expect(record.usage.cost).toBeGreaterThan(0)
  })

  it('an upstream stream that loses only its message_stop still ends with one', async () => {
    const cut = readFixture(FIXTURE).replace(/event: message_stop\n[^\n]*\n\n$/, '')
    expect(cut).not.toContain('message_stop')
    const { gw, client } = await behind({
      'POST /v1/messages': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.end(cut)
      },
    })
    const got = parseSse(await (await postStream(gw, params)).text())
    expect(got.map((e) => e.event).filter((e) => e.startsWith('message_'))).toEqual([
      'message_start',
      'message_delta',
      'message_stop',
    ])
    const message = await client.messages.stream(params).finalMessage()
    expect(message.stop_reason).toBe('pause_turn')
    expect(message.content).toHaveLength(5)
  })

  it('an upstream streaming past the output bound is cut: an error event, no message_stop', async () => {
    const words = Array.from({ length: 400 }, (_, i) => ({
      type: 'content_block_delta',
      index: 0,
      delta: { type: 'text_delta', text: `word${i} ` },
    }))
    const endless = toAnthropicSse([
      {
        type: 'message_start',
        message: {
          id: 'msg_long',
          type: 'message',
          role: 'assistant',
          content: [],
          model: 'claude-sonnet-4-5',
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 9, output_tokens: 1 },
        },
      },
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      ...words,
      { type: 'content_block_stop', index: 0 },
      {
        type: 'message_delta',
        delta: { stop_reason: 'end_turn', stop_sequence: null },
        usage: { output_tokens: 800 },
      },
      { type: 'message_stop' },
    ])
    const { gw } = await behind({
      'POST /v1/messages': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        // One event per write, so the gateway reads them in several batches.
        const events = endless.split('\n\n').filter((e) => e !== '')
        void (async () => {
          for (const e of events) {
            if (res.destroyed) return
            await new Promise<void>((resolve) => res.write(`${e}\n\n`, () => resolve()))
          }
          res.end()
        })()
      },
    })
    const res = await postStream(gw, { ...params, max_tokens: 20 })
    expect(res.status).toBe(200)
    const id = res.headers.get('x-generation-id')!
    const got = parseSse(await res.text())
    // Anthropic's own events up to the cut (its message_start usage, not a translation's zeros).
    expect(got[0]!.data).toMatchObject({ message: { id, usage: { input_tokens: 9, output_tokens: 1 } } })
    expect(got.map((e) => e.event)).not.toContain('message_stop')
    expect(got.at(-1)!.data).toMatchObject({ type: 'error', error: { type: 'api_error' } })
    const text = got
      .filter((e) => e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { text: string }).text)
      .join('')
    // Cut near the bound of 20 tokens (cutOffAt allows an eighth more), far from the 400 words sent.
    expect(text.split(' ').length).toBeLessThan(60)
    const record = await readGeneration(gw, id)
    expect(record).toMatchObject({ api: '/v1/messages', streamed: true })
    expect(gw.deps.stats.outputOverruns).toBe(1)
  })

  it('a client that aborts mid-stream leaves a cancelled record, and the upstream is released', async () => {
    const { fake, gw, client } = await behind({
      'POST /v1/messages': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        // Sends the start of a web search answer, then nothing more: the client leaves.
        const events = readFixture(FIXTURE).split('\n\n').slice(0, 12).join('\n\n')
        res.write(`${events}\n\n`)
      },
    })
    const stream = client.messages.stream(params)
    let id = ''
    let sawServerTool!: () => void
    const serverTool = new Promise<void>((resolve) => (sawServerTool = resolve))
    stream.on('streamEvent', (e) => {
      if (e.type === 'message_start') id = e.message.id
      if (e.type === 'content_block_start' && e.content_block.type === 'web_search_tool_result')
        sawServerTool()
    })
    await new Promise((resolve) => stream.once('text', resolve))
    const aborted = fake.nextAbort()
    const ended = stream.done().catch((e: unknown) => e)
    // The search's blocks arrive before the client leaves.
    await serverTool
    stream.abort()
    await aborted
    expect(await ended).toBeInstanceOf(Anthropic.APIUserAbortError)
    expect(fake.abortedResponses).toBe(1)
    const record = await readGeneration(gw, id)
    expect(record).toMatchObject({ api: '/v1/messages', streamed: true, cancelled: true })
  })

  it('a charge that cannot be committed ends the stream with an error event instead of message_stop', async () => {
    const store = createMemoryStore()
    store.ledger.settle = async () => {
      throw new Error('database is down')
    }
    const { gw } = await behind({ 'POST /v1/messages': sseFile(FIXTURE) }, store)
    const res = await postStream(gw, params)
    expect(res.status).toBe(200)
    const got = parseSse(await res.text())
    expect(got.map((e) => e.event)).not.toContain('message_stop')
    // Everything before it came through as Anthropic sent it.
    expect(got.map((e) => e.event)).toContain('message_delta')
    expect(got.at(-1)!.data).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
    expect(gw.deps.stats.settleFailures).toBe(1)
  })
})

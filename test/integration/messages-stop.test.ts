import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import { sendJson, startFakeUpstream, type FakeHandler } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// A stop sequence that ends an answer on /v1/messages: `stop_reason: "stop_sequence"` with the sequence,
// where the upstream tells which one matched (Anthropic, vLLM-style `stop_reason`, the mock), and
// `end_turn` where it cannot be known (OpenAI's plain `stop`).

const UPSTREAM_KEY = 'sk-ant-api03-FAKE-test-key-0000000000'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function gateway(env: Record<string, string> = {}): Promise<TestGateway> {
  const gw = await startGateway({ env, listen: true })
  cleanups.push(() => gw.close())
  return gw
}

async function behind(routes: Record<string, FakeHandler>, env: (origin: string) => Record<string, string>) {
  const fake = await startFakeUpstream(routes)
  const gw = await gateway(env(fake.origin))
  cleanups.push(() => fake.close())
  return { fake, client: sdk(gw) }
}

const sdk = (gw: TestGateway) => new Anthropic({ baseURL: gw.origin, apiKey: 'sk-dev', maxRetries: 0 })

const message = (stopReason: string, stopSequence: string | null) => ({
  id: 'msg_01',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5',
  content: [{ type: 'text', text: 'one, two, ' }],
  stop_reason: stopReason,
  stop_sequence: stopSequence,
  usage: { input_tokens: 12, output_tokens: 5 },
})

const messageEvents = (stopReason: string, stopSequence: string | null) =>
  toAnthropicSse([
    {
      type: 'message_start',
      message: { ...message('', null), content: [], stop_reason: null, stop_sequence: null },
    },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'one, two, ' } },
    { type: 'content_block_stop', index: 0 },
    {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: stopSequence },
      usage: { output_tokens: 5 },
    },
    { type: 'message_stop' },
  ])

describe('/v1/messages stop sequences', () => {
  it('the mock: a stop sequence that cut the answer is named, blocking and streamed', async () => {
    const client = sdk(await gateway())
    const params = {
      model: 'mock/chat',
      max_tokens: 200,
      stop_sequences: ['zebra', 'fox'],
      messages: [{ role: 'user' as const, content: 'hello' }],
    }
    const answer = await client.messages.create(params)
    expect(answer).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'fox' })
    expect((answer.content[0] as Anthropic.TextBlock).text).not.toContain('fox')
    const streamed = await client.messages.stream(params).finalMessage()
    expect(streamed).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'fox' })
    expect(streamed.content).toEqual(answer.content)
    // No sequence matched: a plain end of turn.
    const plain = await client.messages.create({ ...params, stop_sequences: ['zebra'] })
    expect(plain).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null })
  })

  it('an Anthropic upstream: its stop_sequence comes back, blocking and streamed', async () => {
    const { client } = await behind(
      {
        'POST /v1/messages': (req, res) => {
          if ((req.body as { stream?: boolean }).stream !== true) {
            sendJson(res, 200, message('stop_sequence', 'three'))
            return
          }
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.end(messageEvents('stop_sequence', 'three'))
        },
      },
      (origin) => ({ ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: origin }),
    )
    const params = {
      model: 'anthropic/claude-sonnet-4-5',
      max_tokens: 100,
      stop_sequences: ['three'],
      messages: [{ role: 'user' as const, content: 'Count' }],
    }
    const answer = await client.messages.create(params)
    expect(answer).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'three' })
    const streamed = await client.messages.stream(params).finalMessage()
    expect(streamed).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'three' })
  })

  it('an OpenAI-compatible upstream: vLLM names the stop string; OpenAI does not, so end_turn', async () => {
    let stopReason: string | undefined = 'three'
    const { client } = await behind(
      {
        'POST /v1/chat/completions': (_req, res) =>
          sendJson(res, 200, {
            id: 'chatcmpl-1',
            object: 'chat.completion',
            created: 1700000000,
            model: 'gpt-4o-mini',
            choices: [
              {
                index: 0,
                message: { role: 'assistant', content: 'one, two, ' },
                logprobs: null,
                finish_reason: 'stop',
                ...(stopReason === undefined ? {} : { stop_reason: stopReason }),
              },
            ],
            usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
          }),
      },
      (origin) => ({ OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const params = {
      model: 'openai/gpt-4o-mini',
      max_tokens: 100,
      stop_sequences: ['three'],
      messages: [{ role: 'user' as const, content: 'Count' }],
    }
    expect(await client.messages.create(params)).toMatchObject({
      stop_reason: 'stop_sequence',
      stop_sequence: 'three',
    })
    stopReason = undefined
    expect(await client.messages.create(params)).toMatchObject({
      stop_reason: 'end_turn',
      stop_sequence: null,
    })
    // A stop string that is not one of the client's (the model's own) is not a stop sequence.
    stopReason = '</s>'
    expect(await client.messages.create(params)).toMatchObject({
      stop_reason: 'end_turn',
      stop_sequence: null,
    })
  })
})

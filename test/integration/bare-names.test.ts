import Anthropic from '@anthropic-ai/sdk'
import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import { sendJson, startFakeUpstream, type FakeHandler } from '../support/fake-upstream.ts'
import { devAuth, readGeneration, startGateway } from '../support/gateway.ts'

// The bare vendor names Claude Code, Codex and the SDKs send by default (`claude-opus-4-6`, `gpt-5`)
// reach the built-in catalogue models with no config file.

const UPSTREAM_KEY = 'sk-ant-api03-FAKE-test-key-0000000000'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function behind(routes: Record<string, FakeHandler>, env: (origin: string) => Record<string, string>) {
  const fake = await startFakeUpstream(routes)
  const gw = await startGateway({ env: env(fake.origin), listen: true })
  cleanups.push(
    () => gw.close(),
    () => fake.close(),
  )
  return { fake, gw }
}

describe('bare vendor names of built-in models', () => {
  it('claude-opus-4-6 on /v1/messages (streamed, as Claude Code sends it) reaches anthropic/claude-opus-4-6', async () => {
    const { fake, gw } = await behind(
      {
        'POST /v1/messages': (_req, res) => {
          res.writeHead(200, { 'content-type': 'text/event-stream' })
          res.end(
            toAnthropicSse([
              {
                type: 'message_start',
                message: {
                  id: 'msg_1',
                  type: 'message',
                  role: 'assistant',
                  model: 'claude-opus-4-6',
                  content: [],
                  stop_reason: null,
                  stop_sequence: null,
                  usage: { input_tokens: 9, output_tokens: 1 },
                },
              },
              { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
              { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hi.' } },
              { type: 'content_block_stop', index: 0 },
              { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { output_tokens: 3 } },
              { type: 'message_stop' },
            ]),
          )
        },
      },
      (origin) => ({ ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: origin }),
    )
    const client = new Anthropic({ baseURL: gw.origin, apiKey: 'sk-dev', maxRetries: 0 })
    const stream = client.messages.stream({
      model: 'claude-opus-4-6',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'hello' }],
    })
    const message = await stream.finalMessage()
    expect(message.content).toMatchObject([{ type: 'text', text: 'Hi.' }])
    expect((fake.requests[0]!.body as { model: string }).model).toBe('claude-opus-4-6')
    const id = (await stream.withResponse()).response.headers.get('x-generation-id')!
    expect(await readGeneration(gw, id)).toMatchObject({
      model: 'anthropic/claude-opus-4-6',
      api: '/v1/messages',
    })
  })

  it('gpt-4o-mini on /v1/responses and GET /v1/models/gpt-4o-mini reach openai/gpt-4o-mini', async () => {
    const { fake, gw } = await behind(
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
                message: { role: 'assistant', content: 'Hi.' },
                logprobs: null,
                finish_reason: 'stop',
              },
            ],
            usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 },
          }),
      },
      (origin) => ({ OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
    const res = await client.responses.create({ model: 'gpt-4o-mini', input: 'hello' })
    expect(res.output_text).toBe('Hi.')
    expect((fake.requests[0]!.body as { model: string }).model).toBe('gpt-4o-mini')
    const model = await fetch(`${gw.origin}/v1/models/gpt-4o-mini`, { headers: devAuth })
    expect(model.status).toBe(200)
    expect(await model.json()).toMatchObject({ id: 'openai/gpt-4o-mini', aliases: ['gpt-4o-mini'] })
  })
})

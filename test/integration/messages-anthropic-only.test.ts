import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import { sendJson, startFakeUpstream, type FakeHandler } from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'

// Anthropic's server tools (web search, code execution, bash, text editor, …) and documents by URL
// reach an Anthropic upstream as the client sent them; towards any other upstream they are a 400
// naming the tool, before admission, with nothing sent upstream.

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
  return { fake, gw, client: sdk(gw) }
}

const sdk = (gw: TestGateway) => new Anthropic({ baseURL: gw.origin, apiKey: 'sk-dev', maxRetries: 0 })

const webSearch = { type: 'web_search_20250305', name: 'web_search', max_uses: 2 } as const
const pdf = { type: 'document', source: { type: 'url', url: 'https://example.com/report.pdf' } } as const

const answer = {
  id: 'msg_01',
  type: 'message',
  role: 'assistant',
  model: 'claude-sonnet-4-5',
  content: [
    { type: 'server_tool_use', id: 'srvtoolu_01', name: 'web_search', input: { query: 'weather Paris' } },
    {
      type: 'web_search_tool_result',
      tool_use_id: 'srvtoolu_01',
      content: [
        { type: 'web_search_result', url: 'https://example.com', title: 'Weather', encrypted_content: 'x' },
      ],
    },
    { type: 'text', text: 'It is sunny in Paris.' },
  ],
  stop_reason: 'end_turn',
  stop_sequence: null,
  usage: { input_tokens: 120, output_tokens: 20, server_tool_use: { web_search_requests: 1 } },
}

describe('/v1/messages: what only Anthropic serves', () => {
  it('reaches an Anthropic upstream unchanged: a server tool and a URL document', async () => {
    const { fake, client } = await behind(
      { 'POST /v1/messages': (_req, res) => sendJson(res, 200, answer) },
      (origin) => ({ ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: origin }),
    )
    const params = {
      model: 'anthropic/claude-sonnet-4-5',
      max_tokens: 1024,
      tools: [webSearch, { name: 'get_weather', input_schema: { type: 'object' as const, properties: {} } }],
      messages: [
        {
          role: 'user' as const,
          content: [pdf, { type: 'text' as const, text: 'Summarise it, and check the weather in Paris' }],
        },
      ],
    }
    const message = await client.messages.create(params as Anthropic.MessageCreateParamsNonStreaming)
    expect(fake.requests).toHaveLength(1)
    const { model: _model, ...rest } = params
    expect(fake.requests[0]!.body).toEqual({ ...rest, model: 'claude-sonnet-4-5' })
    // The answer comes back as Anthropic gave it: the server tool's blocks and usage included.
    expect(message.content).toEqual(answer.content)
    expect(message.usage).toMatchObject({ server_tool_use: { web_search_requests: 1 }, input_tokens: 120 })
    expect(message.model).toBe('anthropic/claude-sonnet-4-5')
  })

  it('towards an OpenAI-compatible upstream (or the mock): a 400 naming the tool, nothing sent', async () => {
    const { fake, client } = await behind(
      { 'POST /v1/chat/completions': (_req, res) => sendJson(res, 500, {}) },
      (origin) => ({ OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const refused = async (params: Record<string, unknown>) => {
      const err = (await client.messages
        .create({ max_tokens: 100, ...params } as unknown as Anthropic.MessageCreateParamsNonStreaming)
        .catch((e: unknown) => e)) as InstanceType<typeof Anthropic.APIError>
      expect(err).toBeInstanceOf(Anthropic.BadRequestError)
      return err.error as { type: string; error: { type: string; message: string } }
    }
    const tool = await refused({
      model: 'openai/gpt-4o-mini',
      tools: [webSearch],
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    })
    expect(tool.error.type).toBe('invalid_request_error')
    expect(tool.error.message).toContain('web_search_20250305')
    expect(tool.error.message).toContain('only supported by Anthropic upstreams')
    const document = await refused({
      model: 'openai/gpt-4o-mini',
      messages: [{ role: 'user', content: [pdf, { type: 'text', text: 'Summarise it' }] }],
    })
    expect(document.error.message).toContain('a document source of type "url"')
    const mock = await refused({
      model: 'mock/chat',
      tools: [webSearch],
      messages: [{ role: 'user', content: 'Weather?' }],
    })
    expect(mock.error.message).toContain('web_search')
    expect(fake.requests).toHaveLength(0)
  })
})

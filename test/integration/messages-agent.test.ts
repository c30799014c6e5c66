import Anthropic from '@anthropic-ai/sdk'
import { afterEach, describe, expect, it } from 'vitest'
import { toAnthropicSse } from '../support/fake-anthropic.ts'
import {
  sendSse,
  startFakeUpstream,
  writeSseText,
  type FakeHandler,
  type FakeUpstream,
} from '../support/fake-upstream.ts'
import { readGeneration, startGateway, type TestGateway } from '../support/gateway.ts'

// The request sequence a coding agent (Claude Code) sends, end to end through the gateway: a long
// system prompt with cache_control, tools, thinking, streaming, x-api-key auth, and a tool-result loop;
// once against a fake Anthropic upstream, once against a fake OpenAI-compatible one. Both are billed.

const UPSTREAM_KEY = 'sk-upstream-FAKE-0000000000'

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c()
})

async function setup(
  routes: Record<string, FakeHandler>,
  env: (origin: string) => Record<string, string>,
): Promise<{ fake: FakeUpstream; gw: TestGateway }> {
  const fake = await startFakeUpstream(routes)
  cleanups.push(() => fake.close())
  const gw = await startGateway({ env: env(fake.origin), listen: true })
  cleanups.push(() => gw.close())
  return { fake, gw }
}

const system: Anthropic.TextBlockParam[] = [
  {
    type: 'text',
    text: 'You are Claude Code, an interactive CLI tool. '.repeat(200),
    cache_control: { type: 'ephemeral' },
  },
]
const tools: Anthropic.Tool[] = [
  {
    name: 'Read',
    description: 'Read a file',
    input_schema: { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] },
  },
  {
    name: 'Bash',
    description: 'Run a command',
    input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
]

/** Two turns as the agent sends them: a question, then the tool's result with the whole history. */
async function agentLoop(gw: TestGateway, model: string) {
  // Claude Code authenticates with x-api-key (the SDK's apiKey) and sends ?beta=true with betas.
  const client = new Anthropic({ baseURL: gw.origin, apiKey: 'sk-dev', maxRetries: 0 })
  const question: Anthropic.MessageParam = {
    role: 'user',
    content: [{ type: 'text', text: 'What is in package.json?', cache_control: { type: 'ephemeral' } }],
  }
  const params = {
    model,
    max_tokens: 8192,
    system,
    tools,
    thinking: { type: 'enabled' as const, budget_tokens: 4000 },
  }
  const first = client.beta.messages.stream({
    ...params,
    messages: [question],
    betas: ['interleaved-thinking-2025-05-14'],
  })
  const firstMessage = await first.finalMessage()
  const call = firstMessage.content.find((b) => b.type === 'tool_use')
  if (call?.type !== 'tool_use') throw new Error('no tool call')
  const second = await client.beta.messages
    .stream({
      ...params,
      betas: ['interleaved-thinking-2025-05-14'],
      messages: [
        question,
        { role: 'assistant', content: firstMessage.content as Anthropic.Beta.BetaContentBlockParam[] },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: call.id, content: '{"name":"junction"}' }],
        },
      ],
    })
    .finalMessage()
  return { firstMessage, second, call }
}

const ev = {
  start: (id: string, input: number) => ({
    type: 'message_start',
    message: {
      id,
      type: 'message',
      role: 'assistant',
      content: [],
      model: 'claude-sonnet-4-5',
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: input,
        output_tokens: 1,
        cache_creation_input_tokens: 2400,
        cache_read_input_tokens: 0,
      },
    },
  }),
  block: (index: number, content_block: object) => ({ type: 'content_block_start', index, content_block }),
  delta: (index: number, delta: object) => ({ type: 'content_block_delta', index, delta }),
  stop: (index: number) => ({ type: 'content_block_stop', index }),
  end: (stop_reason: string, output_tokens: number) => [
    { type: 'message_delta', delta: { stop_reason, stop_sequence: null }, usage: { output_tokens } },
    { type: 'message_stop' },
  ],
}

const claudeToolTurn = toAnthropicSse([
  ev.start('msg_1', 20),
  ev.block(0, { type: 'thinking', thinking: '', signature: '' }),
  ev.delta(0, { type: 'thinking_delta', thinking: 'I should read the file.' }),
  ev.delta(0, { type: 'signature_delta', signature: 'sig-claude-1' }),
  ev.stop(0),
  ev.block(1, { type: 'tool_use', id: 'toolu_01', name: 'Read', input: {} }),
  ev.delta(1, { type: 'input_json_delta', partial_json: '{"file_path":' }),
  ev.delta(1, { type: 'input_json_delta', partial_json: '"package.json"}' }),
  ev.stop(1),
  ...ev.end('tool_use', 40),
])
const claudeTextTurn = toAnthropicSse([
  ev.start('msg_2', 30),
  ev.block(0, { type: 'text', text: '' }),
  ev.delta(0, { type: 'text_delta', text: 'It names the package junction.' }),
  ev.stop(0),
  ...ev.end('end_turn', 9),
])

const chunk = (delta: object, finish: string | null = null) =>
  JSON.stringify({
    id: 'c',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
  })
const usage = (prompt: number, completion: number) =>
  JSON.stringify({
    id: 'c',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'm',
    choices: [],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion },
  })

describe('a coding agent through /v1/messages', () => {
  it('against an Anthropic upstream: betas, cache_control and signatures reach it; both turns billed', async () => {
    let turn = 0
    const { fake, gw } = await setup(
      {
        'POST /v1/messages': (_req, res) => writeSseText(res, turn++ === 0 ? claudeToolTurn : claudeTextTurn),
      },
      (origin) => ({ ANTHROPIC_API_KEY: UPSTREAM_KEY, ANTHROPIC_BASE_URL: origin }),
    )
    const { firstMessage, second, call } = await agentLoop(gw, 'anthropic/claude-sonnet-4-5')
    expect(firstMessage.content[0]).toEqual({
      type: 'thinking',
      thinking: 'I should read the file.',
      signature: 'sig-claude-1',
    })
    expect(call.input).toEqual({ file_path: 'package.json' })
    expect(second.content).toEqual([{ type: 'text', text: 'It names the package junction.' }])
    expect(firstMessage.usage).toMatchObject({
      input_tokens: 20,
      cache_creation_input_tokens: 2400,
      output_tokens: 40,
    })

    const [one, two] = fake.requests
    expect(one!.headers['anthropic-beta']).toBe('interleaved-thinking-2025-05-14')
    expect(one!.body).toMatchObject({ system, tools, thinking: params(), stream: true })
    // The second turn hands the thinking block back with its signature, and the cache marks stay.
    expect((two!.body as { messages: unknown[] }).messages).toEqual([
      {
        role: 'user',
        content: [{ type: 'text', text: 'What is in package.json?', cache_control: { type: 'ephemeral' } }],
      },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'I should read the file.', signature: 'sig-claude-1' },
          { type: 'tool_use', id: 'toolu_01', name: 'Read', input: { file_path: 'package.json' } },
        ],
      },
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: '{"name":"junction"}' }],
      },
    ])
    const record = await readGeneration(gw, second.id)
    expect(record).toMatchObject({
      api: '/v1/messages',
      usage: { prompt_tokens: 2430, completion_tokens: 9 },
    })
    expect(record.usage.cost).toBeGreaterThan(0)
  })

  it('against an OpenAI-compatible upstream: translated both ways, both turns billed', async () => {
    let turn = 0
    const { fake, gw } = await setup(
      {
        'POST /v1/chat/completions': (_req, res) =>
          sendSse(
            res,
            turn++ === 0
              ? [
                  chunk({ role: 'assistant', reasoning_content: 'I should read the file.' }),
                  chunk({
                    tool_calls: [
                      {
                        index: 0,
                        id: 'call_1',
                        type: 'function',
                        function: { name: 'Read', arguments: '{"file_path":"package.json"}' },
                      },
                    ],
                  }),
                  chunk({}, 'tool_calls'),
                  usage(2500, 30),
                  '[DONE]',
                ]
              : [
                  chunk({ role: 'assistant', content: 'It names the package junction.' }),
                  chunk({}, 'stop'),
                  usage(2600, 9),
                  '[DONE]',
                ],
          ),
      },
      (origin) => ({ OPENAI_API_KEY: UPSTREAM_KEY, OPENAI_BASE_URL: `${origin}/v1` }),
    )
    const { firstMessage, second, call } = await agentLoop(gw, 'openai/gpt-5')
    expect(firstMessage.content.map((b) => b.type)).toEqual(['thinking', 'tool_use'])
    expect(call).toMatchObject({ id: 'call_1', name: 'Read', input: { file_path: 'package.json' } })
    expect(second.content).toEqual([{ type: 'text', text: 'It names the package junction.' }])

    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const sent = fake.requests.map((r) => r.body as Record<string, any>)
    expect(sent[0]!.messages[0]).toEqual({
      role: 'system',
      content: [{ type: 'text', text: system[0]!.text, cache_control: { type: 'ephemeral' } }],
    })
    expect(sent[0]!.tools.map((t: { function: { name: string } }) => t.function.name)).toEqual([
      'Read',
      'Bash',
    ])
    expect(sent[0]!.stream).toBe(true)
    // thinking.budget_tokens 4000 as OpenAI's effort.
    expect(sent[0]!.reasoning_effort).toBe('low')
    expect(sent[1]!.messages.slice(2)).toEqual([
      expect.objectContaining({
        role: 'assistant',
        tool_calls: [
          {
            id: 'call_1',
            type: 'function',
            function: { name: 'Read', arguments: '{"file_path":"package.json"}' },
          },
        ],
      }),
      { role: 'tool', tool_call_id: 'call_1', content: '{"name":"junction"}' },
    ])
    const record = await readGeneration(gw, second.id)
    expect(record).toMatchObject({
      api: '/v1/messages',
      usage: { prompt_tokens: 2600, completion_tokens: 9 },
    })
    expect(record.usage.cost).toBeGreaterThan(0)
  })
})

function params() {
  return { type: 'enabled', budget_tokens: 4000 }
}

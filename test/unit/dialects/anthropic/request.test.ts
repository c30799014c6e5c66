import { describe, expect, it } from 'vitest'
import { anthropicOnly, toChatRequest, toPrompt } from '../../../../src/dialects/anthropic/request.ts'
import { toAnthropicRequest, toUpstreamBody } from '../../../../src/providers/anthropic/request.ts'
import { ANTHROPIC_NATIVE } from '../../../../src/providers/anthropic/wire.ts'
import { parseMessagesRequest } from '../../../../src/schemas/messages.ts'

// A coding agent's turn: a cached system prompt, tools, thinking, and a tool result loop.
const agentTurn = {
  model: 'anthropic/claude-sonnet-4-5',
  max_tokens: 4096,
  system: [{ type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral' } }],
  tools: [
    {
      name: 'read_file',
      description: 'Read a file',
      input_schema: { type: 'object', properties: { path: { type: 'string' } } },
      cache_control: { type: 'ephemeral' },
    },
  ],
  tool_choice: { type: 'auto', disable_parallel_tool_use: true },
  thinking: { type: 'enabled', budget_tokens: 2048 },
  stop_sequences: ['END'],
  top_k: 5,
  metadata: { user_id: 'user-42' },
  messages: [
    { role: 'user', content: 'Read README.md' },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'I should read it.', signature: 'sig-abc' },
        { type: 'redacted_thinking', data: 'opaque' },
        { type: 'text', text: 'Reading.' },
        { type: 'tool_use', id: 'toolu_01', name: 'read_file', input: { path: 'README.md' } },
      ],
    },
    {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_01', content: '# Junction' },
        { type: 'text', text: 'Summarise it.', cache_control: { type: 'ephemeral' } },
        { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
        { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } },
      ],
    },
  ],
}

describe('Anthropic Messages request → chat request', () => {
  it('translates system, thinking, tools, tool results, images and documents', () => {
    const req = toChatRequest(parseMessagesRequest(agentTurn))
    expect(req.max_completion_tokens).toBe(4096)
    expect(req.stop).toEqual(['END'])
    expect(req.top_k).toBe(5)
    expect(req.user).toBe('user-42')
    expect(req.reasoning).toEqual({ enabled: true, max_tokens: 2048, effort: 'low' })
    expect(req.parallel_tool_calls).toBe(false)
    expect(req.tool_choice).toBe('auto')
    expect(req.tools).toEqual([
      {
        type: 'function',
        function: {
          name: 'read_file',
          description: 'Read a file',
          parameters: agentTurn.tools[0]!.input_schema,
        },
        cache_control: { type: 'ephemeral' },
      },
    ])
    expect(req.messages).toEqual([
      {
        role: 'system',
        content: [{ type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral' } }],
      },
      { role: 'user', content: 'Read README.md' },
      {
        role: 'assistant',
        content: 'Reading.',
        reasoning: 'I should read it.',
        reasoning_details: [
          {
            type: 'reasoning.text',
            text: 'I should read it.',
            signature: 'sig-abc',
            format: 'anthropic-claude-v1',
            index: 0,
          },
          { type: 'reasoning.encrypted', data: 'opaque', format: 'anthropic-claude-v1', index: 1 },
        ],
        tool_calls: [
          {
            id: 'toolu_01',
            type: 'function',
            function: { name: 'read_file', arguments: '{"path":"README.md"}' },
          },
        ],
      },
      { role: 'tool', tool_call_id: 'toolu_01', content: '# Junction' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Summarise it.', cache_control: { type: 'ephemeral' } },
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=' } },
        ],
      },
    ])
  })

  it('translated for Anthropic, keeps the thinking signatures and cache_control on the parts it knows', () => {
    const req = toChatRequest(parseMessagesRequest(agentTurn))
    const body = toAnthropicRequest(req, 'claude-sonnet-4-5')
    expect(body.messages[1]!.content[0]).toEqual({
      type: 'thinking',
      thinking: 'I should read it.',
      signature: 'sig-abc',
    })
    expect(body.messages[1]!.content[1]).toEqual({ type: 'redacted_thinking', data: 'opaque' })
    expect(body.system).toEqual([
      { type: 'text', text: 'You are a coding agent.', cache_control: { type: 'ephemeral' } },
    ])
  })

  it('carries the client body to an Anthropic upstream whole, with the deployment model and reserved limit', () => {
    const withExtra = { ...agentTurn, context_management: { edits: [] } }
    const req = toChatRequest(parseMessagesRequest(withExtra), { beta: ['context-management-2025-06-27'] })
    expect(req[ANTHROPIC_NATIVE]?.beta).toEqual(['context-management-2025-06-27'])
    // Symbol-keyed: a spread keeps it, JSON never shows it.
    expect({ ...req }[ANTHROPIC_NATIVE]).toBeDefined()
    expect(JSON.stringify(req)).not.toContain('context_management')
    const body = toUpstreamBody({ ...req, max_completion_tokens: 1000 }, 'claude-sonnet-4-5-20250929', true)
    expect(body).toEqual({
      ...withExtra,
      model: 'claude-sonnet-4-5-20250929',
      max_tokens: 1000,
      stream: true,
    })
  })

  it('maps tool_choice and thinking modes', () => {
    const base = {
      model: 'm/x',
      max_tokens: 10,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [{ name: 't', input_schema: { type: 'object' } }],
    }
    const choice = (tool_choice: unknown) =>
      toChatRequest(parseMessagesRequest({ ...base, tool_choice })).tool_choice
    expect(choice({ type: 'any' })).toBe('required')
    expect(choice({ type: 'none' })).toBe('none')
    expect(choice({ type: 'tool', name: 't' })).toEqual({ type: 'function', function: { name: 't' } })
    expect(toPrompt(parseMessagesRequest({ ...base, thinking: { type: 'adaptive' } })).reasoning).toEqual({
      enabled: true,
    })
    expect(toPrompt(parseMessagesRequest({ ...base, thinking: { type: 'disabled' } })).reasoning).toEqual({
      enabled: false,
    })
  })

  it('lists what only Anthropic serves (server tools, URL and content documents), and translates the rest', () => {
    const base = { model: 'm/x', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }
    const req = parseMessagesRequest({
      ...base,
      tools: [
        { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
        { name: 'read_file', input_schema: { type: 'object' } },
        { type: 'custom', name: 'write_file', input_schema: { type: 'object' } },
      ],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' } },
            { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'notes' } },
            {
              type: 'tool_result',
              tool_use_id: 't1',
              content: [{ type: 'document', source: { type: 'content', content: [] } }],
            },
          ],
        },
      ],
    })
    expect(anthropicOnly(req)).toEqual([
      { what: 'tool "web_search" of type "web_search_20250305"', param: 'tools[0].type' },
      { what: 'a document source of type "url"', param: 'messages[0].content[0].source.type' },
      { what: 'a document source of type "content"', param: 'messages[0].content[2].content[0].source.type' },
    ])
    const chat = toChatRequest(req)
    // The chat request (what the prompt bound is counted on) keeps the client's own tools only.
    expect(chat.tools?.map((t) => (t as { function: { name: string } }).function.name)).toEqual([
      'read_file',
      'write_file',
    ])
    // The native body, which an Anthropic upstream gets, keeps every one.
    expect(toUpstreamBody(chat, 'claude-x', false)).toMatchObject({
      tools: req.tools,
      messages: req.messages,
    })
    expect(anthropicOnly(parseMessagesRequest(base))).toEqual([])
  })

  it('requires max_tokens, as Anthropic does', () => {
    expect(() => parseMessagesRequest({ model: 'm/x', messages: [{ role: 'user', content: 'hi' }] })).toThrow(
      expect.objectContaining({
        status: 400,
        code: 'missing_field',
        param: 'max_tokens',
        message: 'max_tokens: Field required',
      }),
    )
  })
})

import { describe, expect, it } from 'vitest'
import {
  fromEncryptedContent,
  toChatRequest,
  toEncryptedContent,
} from '../../../../src/dialects/responses/request.ts'
import { parseResponsesRequest } from '../../../../src/schemas/responses.ts'

const translate = (body: Record<string, unknown>) =>
  toChatRequest(parseResponsesRequest({ model: 'openai/gpt-4o', ...body }))

describe('Responses request → chat request', () => {
  it('puts instructions first as a system message and a string input as the user message', () => {
    expect(translate({ input: 'Hello', instructions: 'Be brief' }).messages).toEqual([
      { role: 'system', content: 'Be brief' },
      { role: 'user', content: 'Hello' },
    ])
  })

  it('maps every honoured field to its chat counterpart', () => {
    const req = translate({
      input: 'x',
      tools: [
        { type: 'function', name: 'f', parameters: { type: 'object' }, strict: true, description: 'does f' },
      ],
      tool_choice: { type: 'function', name: 'f' },
      parallel_tool_calls: false,
      text: {
        format: { type: 'json_schema', name: 'out', schema: { type: 'object' }, strict: true },
        verbosity: 'low',
      },
      max_output_tokens: 64,
      temperature: 0.5,
      top_p: 0.8,
      reasoning: { effort: 'high', summary: 'auto' },
      metadata: { k: 'v' },
      user: 'u1',
      stream: true,
      store: true,
      include: ['reasoning.encrypted_content'],
    })
    expect(req).toEqual({
      model: 'openai/gpt-4o',
      messages: [{ role: 'user', content: 'x' }],
      tools: [
        {
          type: 'function',
          function: { name: 'f', description: 'does f', parameters: { type: 'object' }, strict: true },
        },
      ],
      tool_choice: { type: 'function', function: { name: 'f' } },
      parallel_tool_calls: false,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'out', schema: { type: 'object' }, strict: true },
      },
      verbosity: 'low',
      max_completion_tokens: 64,
      temperature: 0.5,
      top_p: 0.8,
      reasoning_effort: 'high',
      user: 'u1',
      stream: true,
      stream_options: { include_usage: true },
    })
  })

  it('maps json_object, and leaves text format out of the chat request', () => {
    expect(translate({ input: 'x', text: { format: { type: 'json_object' } } }).response_format).toEqual({
      type: 'json_object',
    })
    expect(translate({ input: 'x', text: { format: { type: 'text' } } }).response_format).toBeUndefined()
  })

  it('makes one assistant turn of reasoning, message and function calls, and tool messages of their outputs', () => {
    const details = [
      { type: 'reasoning.text', text: 'hmm', signature: 'sig', format: 'anthropic-claude-v1', index: 0 },
    ]
    const req = translate({
      input: [
        { role: 'developer', content: 'rules' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather?' }] },
        {
          type: 'reasoning',
          id: 'rs_1',
          summary: [{ type: 'summary_text', text: 'hmm' }],
          encrypted_content: toEncryptedContent(details),
        },
        {
          type: 'message',
          role: 'assistant',
          id: 'msg_1',
          status: 'completed',
          content: [{ type: 'output_text', text: 'Checking.', annotations: [] }],
        },
        {
          type: 'function_call',
          id: 'fc_1',
          call_id: 'call_1',
          name: 'get_weather',
          arguments: '{"city":"Oslo"}',
        },
        { type: 'function_call', call_id: 'call_2', name: 'get_weather', arguments: '{"city":"Rome"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'cold' },
        { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: 'warm' }] },
        { role: 'assistant', content: 'Oslo is cold, Rome warm.' },
        { role: 'user', content: 'Thanks' },
      ],
    })
    expect(req.messages).toEqual([
      { role: 'developer', content: 'rules' },
      { role: 'user', content: [{ type: 'text', text: 'Weather?' }] },
      {
        role: 'assistant',
        content: 'Checking.',
        reasoning: 'hmm',
        reasoning_details: details,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
          { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'cold' },
      { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'warm' }] },
      { role: 'assistant', content: 'Oslo is cold, Rome warm.' },
      { role: 'user', content: 'Thanks' },
    ])
  })

  it('sends images and files, by URL, file id or data, as chat parts', () => {
    const req = translate({
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'high' },
            { type: 'input_image', file_id: 'file-abc' },
            { type: 'input_file', file_id: 'file-def' },
            { type: 'input_file', file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' },
          ],
        },
      ],
    })
    expect(req.messages[0]!.content).toEqual([
      { type: 'image_url', image_url: { url: 'https://example.com/a.png', detail: 'high' } },
      { type: 'image_url', image_url: { url: 'file-abc' } },
      { type: 'file', file: { file_id: 'file-def' } },
      { type: 'file', file: { file_data: 'data:application/pdf;base64,JVBERi0=', filename: 'a.pdf' } },
    ])
  })

  it('keeps an assistant refusal, and drops a turn of reasoning without text or call', () => {
    const req = translate({
      input: [
        { role: 'user', content: 'x' },
        { type: 'message', role: 'assistant', content: [{ type: 'refusal', refusal: 'No.' }] },
        { role: 'user', content: 'y' },
        { type: 'reasoning', summary: [{ type: 'summary_text', text: 'thinking' }] },
        { role: 'user', content: 'z' },
      ],
    })
    expect(req.messages).toEqual([
      { role: 'user', content: 'x' },
      { role: 'assistant', content: '', refusal: 'No.' },
      { role: 'user', content: 'y' },
      { role: 'user', content: 'z' },
    ])
  })
})

describe('reasoning details in encrypted_content', () => {
  it('round-trips details that carry a signature or data, and nothing else', () => {
    const details = [{ type: 'reasoning.encrypted', data: 'opaque', format: 'google-gemini-v1', index: 0 }]
    expect(fromEncryptedContent(toEncryptedContent(details))).toEqual(details)
    expect(toEncryptedContent([{ type: 'reasoning.text', text: 'plain' }])).toBeUndefined()
    expect(toEncryptedContent(undefined)).toBeUndefined()
  })

  it('ignores encrypted content that is not ours', () => {
    expect(fromEncryptedContent('gAAAAABopaque-openai-blob')).toBeUndefined()
    expect(fromEncryptedContent(Buffer.from('{"a":1}').toString('base64'))).toBeUndefined()
    expect(fromEncryptedContent(null)).toBeUndefined()
  })
})

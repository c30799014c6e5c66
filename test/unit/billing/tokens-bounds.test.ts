import { describe, expect, it } from 'vitest'
import {
  embeddingTokenBound,
  imagePartCount,
  promptText,
  promptTokenBound,
} from '../../../src/billing/tokens.ts'
import type { ChatMessage, ChatRequest, EmbeddingsRequest } from '../../../src/providers/types.ts'

// The upper bounds taken before a request (UTF-8 bytes, a fixed cost per image and per message) and
// the prompt text an estimate counts, with exact figures.

const chat = (messages: unknown[], over: object = {}) =>
  ({ model: 'team/m', messages: messages as ChatMessage[], ...over }) as ChatRequest

const bytes = (s: string) => Buffer.byteLength(s)

const audio = { type: 'input_audio', input_audio: { data: 'QUJD', format: 'wav' } }
const AUDIO_JSON = '{"type":"input_audio","input_audio":{"data":"QUJD","format":"wav"}}'
/** A part that is not a text part but carries a `text` field: counted by its JSON, never as text. */
const file = { type: 'file', file: { file_id: 'f1' }, text: 'abc' }
const FILE_JSON = '{"type":"file","file":{"file_id":"f1"},"text":"abc"}'
const toolCalls = [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }]
const TOOL_CALLS_JSON = '[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]'
const tools = [{ type: 'function', function: { name: 'f' } }]
const TOOLS_JSON = '[{"type":"function","function":{"name":"f"}}]'

describe('promptTokenBound', () => {
  it('is 8 per message plus the UTF-8 bytes of string content', () => {
    expect(bytes('héllo wörld')).toBe(13)
    expect(promptTokenBound(chat([{ role: 'user', content: 'héllo wörld' }]))).toBe(8 + 13)
    expect(
      promptTokenBound(
        chat([
          { role: 'system', content: '' },
          { role: 'user', content: 'ab' },
        ]),
      ),
    ).toBe(8 + 0 + 8 + 2)
    expect(promptTokenBound(chat([]))).toBe(0)
  })

  it('counts text parts by their bytes, images at 2 000 and any other part by its JSON', () => {
    expect(bytes(AUDIO_JSON)).toBe(67)
    expect(JSON.stringify(audio)).toBe(AUDIO_JSON)
    const req = chat([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'ça va' },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
          audio,
        ],
      },
    ])
    expect(promptTokenBound(req)).toBe(8 + 6 + 2_000 + 67)
    // Two images, nothing else.
    const images = chat([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'a' } },
          { type: 'image_url', image_url: { url: 'b' } },
        ],
      },
    ])
    expect(promptTokenBound(images)).toBe(8 + 4_000)
  })

  it('counts a part by its JSON when it is not a text part with a string text', () => {
    expect(JSON.stringify(file)).toBe(FILE_JSON)
    expect(promptTokenBound(chat([{ role: 'user', content: [file] }]))).toBe(8 + bytes(FILE_JSON))
    expect(bytes(FILE_JSON)).toBe(52)
    const odd = { type: 'text', text: 42 }
    expect(promptTokenBound(chat([{ role: 'user', content: [odd] }]))).toBe(8 + 25)
    expect(bytes(JSON.stringify(odd))).toBe(25)
  })

  it('adds tool calls and reasoning of an assistant message without content', () => {
    expect(bytes(TOOL_CALLS_JSON)).toBe(72)
    const assistant = { role: 'assistant', content: null, tool_calls: toolCalls, reasoning: 'pensé' }
    expect(promptTokenBound(chat([assistant]))).toBe(8 + 72 + 6)
    const noContent = { role: 'assistant', tool_calls: toolCalls }
    expect(promptTokenBound(chat([noContent]))).toBe(8 + 72)
    const reasoningOnly = { role: 'assistant', content: 'ok', reasoning: '' }
    expect(promptTokenBound(chat([reasoningOnly]))).toBe(8 + 2)
  })

  it('adds the JSON of the tools and of the response format', () => {
    const messages = [{ role: 'user', content: 'hi' }]
    expect(bytes(TOOLS_JSON)).toBe(45)
    expect(promptTokenBound(chat(messages, { tools }))).toBe(8 + 2 + 45)
    const format = { type: 'json_schema', json_schema: { name: 'é' } }
    expect(bytes(JSON.stringify(format))).toBe(50)
    expect(promptTokenBound(chat(messages, { response_format: format }))).toBe(8 + 2 + 50)
    expect(promptTokenBound(chat(messages, { tools, response_format: format }))).toBe(8 + 2 + 45 + 50)
  })
})

describe('embeddingTokenBound', () => {
  const bound = (input: unknown) => embeddingTokenBound({ model: 'team/e', input } as EmbeddingsRequest)

  it('is the UTF-8 bytes of each text', () => {
    expect(bound('héllo')).toBe(6)
    expect(bound(['abc', 'ç', 'de'])).toBe(3 + 2 + 2)
  })

  it('is one per token of token arrays', () => {
    expect(bound([7, 8, 9, 10, 11])).toBe(5)
    expect(bound([[1, 2], [3], [4, 5, 6, 7]])).toBe(7)
  })
})

describe('promptText', () => {
  it('joins the roles, the text, the tool calls and the tools with newlines', () => {
    const req = chat(
      [
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
            file,
            audio,
            { type: 'text', text: 'what is it?' },
          ],
        },
        { role: 'assistant', content: null, tool_calls: toolCalls, reasoning: 'not sent' },
        { role: 'tool', content: 'a cat', tool_call_id: 'c1' },
      ],
      { tools, response_format: { type: 'json_object' } },
    )
    expect(promptText(req)).toBe(
      [
        'system',
        'Be brief.',
        'user',
        'Look:',
        'what is it?',
        'assistant',
        TOOL_CALLS_JSON,
        'tool',
        'a cat',
        TOOLS_JSON,
      ].join('\n'),
    )
  })

  it('is the role alone for a message without content, and nothing more without tools', () => {
    expect(promptText(chat([{ role: 'assistant' }]))).toBe('assistant')
    expect(promptText(chat([{ role: 'user', content: [{ type: 'text', text: 7 }] }]))).toBe('user')
    expect(promptText(chat([]))).toBe('')
  })
})

describe('imagePartCount', () => {
  it('counts the image parts of every message', () => {
    const image = { type: 'image_url', image_url: { url: 'a' } }
    const req = chat([
      { role: 'user', content: [image, { type: 'text', text: 'image_url' }, image] },
      { role: 'assistant', content: 'image_url' },
      { role: 'assistant', content: null, tool_calls: toolCalls },
      { role: 'assistant', tool_calls: toolCalls },
      { role: 'user', content: [audio, image] },
    ])
    expect(imagePartCount(req)).toBe(3)
    expect(imagePartCount(chat([{ role: 'user', content: 'no images' }]))).toBe(0)
  })
})

import { describe, expect, it } from 'vitest'
import {
  promptText,
  promptTextSteps,
  promptTokenBound,
  promptTokenBoundSteps,
} from '../../../src/billing/tokens.ts'
import type { ChatRequest } from '../../../src/providers/types.ts'

// The prompt estimate walks a request a message and a tool at a time, with checkpoints, instead of
// one JSON.stringify of every tool; what it computes must not change.

const tool = (i: number) => ({
  type: 'function' as const,
  function: { name: `f${i}`, description: 'é "q"', parameters: { type: 'object', properties: { a: {} } } },
})

const request = (messages: number, tools: number): ChatRequest => ({
  model: 'mock/chat',
  messages: Array.from({ length: messages }, (_, i) =>
    i % 2 === 0
      ? { role: 'user' as const, content: [{ type: 'text' as const, text: `m${i} ü` }] }
      : {
          role: 'assistant' as const,
          content: null,
          tool_calls: [{ id: `c${i}`, type: 'function' as const, function: { name: 'f', arguments: '{}' } }],
        },
  ),
  ...(tools >= 0 ? { tools: Array.from({ length: tools }, (_, i) => tool(i)) } : {}),
})

/** The single-call forms the sliced ones replace. */
const toolsBytes = (req: ChatRequest) => (req.tools ? Buffer.byteLength(JSON.stringify(req.tools)) : 0)

describe('sliced prompt estimates', () => {
  it.each([
    [1, -1],
    [3, 0],
    [5, 1],
    [200, 300],
  ])('with %i messages and %i tools, the bound and the text are what one JSON.stringify gave', (m, t) => {
    const req = request(m, t)
    const withoutTools = { ...req, tools: undefined }
    expect(promptTokenBound(req)).toBe(promptTokenBound(withoutTools) + toolsBytes(req))
    const text = promptText(withoutTools)
    expect(promptText(req)).toBe(req.tools ? `${text}\n${JSON.stringify(req.tools)}` : text)
  })

  it('reach a checkpoint every 64 messages or tools', () => {
    const count = (work: Generator<void, unknown, void>) => {
      let checkpoints = 0
      for (let step = work.next(); !step.done; step = work.next()) checkpoints++
      return checkpoints
    }
    const req = request(640, 640)
    expect(count(promptTokenBoundSteps(req))).toBe(20)
    expect(count(promptTextSteps(req))).toBe(20)
  })
})

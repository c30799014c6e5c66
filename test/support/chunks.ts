import type { ChatChunk } from '../../src/domain/chat.ts'

/**
 * What an OpenAI client makes of a stream's chunks: concatenated content and reasoning, tool calls
 * reassembled by index, the reasoning_details in order, the last finish reason and the last usage.
 */
export function reassemble(chunks: ChatChunk[]) {
  let content = ''
  let reasoning = ''
  const calls: { id?: string; name?: string; arguments: string }[] = []
  const details: unknown[] = []
  let finish: string | null = null
  for (const c of chunks) {
    const ch = c.choices[0]
    if (!ch) continue
    content += ch.delta.content ?? ''
    reasoning += ch.delta.reasoning ?? ''
    details.push(...(ch.delta.reasoning_details ?? []))
    for (const t of ch.delta.tool_calls ?? []) {
      const call = (calls[t.index] ??= { arguments: '' })
      if (t.id) call.id = t.id
      if (t.function?.name) call.name = t.function.name
      call.arguments += t.function?.arguments ?? ''
    }
    finish = ch.finish_reason ?? finish
  }
  return { content, reasoning, calls, details, finish, usage: chunks.at(-1)?.usage }
}

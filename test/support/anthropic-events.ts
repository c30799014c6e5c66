// Rebuilds a message's content blocks, stop reason and usage from Anthropic stream events, as the SDK's
// MessageStream does: to compare two event sequences by what a client ends up with.

export interface RebuiltMessage {
  content: Record<string, unknown>[]
  stop_reason: unknown
  usage: Record<string, unknown>
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function rebuildMessage(events: readonly any[]): RebuiltMessage {
  const out: RebuiltMessage = { content: [], stop_reason: null, usage: {} }
  const json: Record<number, string> = {}
  for (const e of events) {
    if (e.type === 'message_start') Object.assign(out.usage, e.message.usage)
    if (e.type === 'content_block_start') out.content[e.index] = { ...e.content_block }
    if (e.type === 'content_block_delta') {
      const b = out.content[e.index] as Record<string, string>
      const d = e.delta
      if (d.type === 'text_delta') b.text += d.text
      if (d.type === 'thinking_delta') b.thinking += d.thinking
      if (d.type === 'signature_delta') b.signature = (b.signature ?? '') + d.signature
      if (d.type === 'input_json_delta') json[e.index] = (json[e.index] ?? '') + d.partial_json
    }
    if (e.type === 'content_block_stop' && json[e.index] !== undefined) {
      out.content[e.index]!.input = JSON.parse(json[e.index]!)
    }
    if (e.type === 'message_delta') {
      out.stop_reason = e.delta.stop_reason
      for (const [k, v] of Object.entries(e.usage ?? {})) if (v !== null) out.usage[k] = v
    }
  }
  return out
}

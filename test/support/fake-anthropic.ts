import { readFileSync } from 'node:fs'
import type { ServerResponse } from 'node:http'
import { readSse } from '../../src/sse.ts'
import type { AnthropicEvent } from '../../src/providers/anthropic/wire.ts'

// Anthropic's wire format for fakes and unit tests: fixtures are upstream bytes exactly as the
// Messages API sends them (`event: <type>\ndata: <json>\n\n`).

export function anthropicFixture(name: string): string {
  return readFileSync(new URL(`../fixtures/anthropic/${name}`, import.meta.url), 'utf8')
}

export function anthropicJson(name: string): unknown {
  return JSON.parse(anthropicFixture(name))
}

/** The events of an SSE fixture, parsed by the gateway's own SSE reader. */
export async function anthropicEvents(name: string): Promise<AnthropicEvent[]> {
  const out: AnthropicEvent[] = []
  for await (const e of readSse(once(anthropicFixture(name)))) out.push(JSON.parse(e.data) as AnthropicEvent)
  return out
}

/** SSE text in Anthropic's framing, for events a test builds itself. */
export function toAnthropicSse(events: readonly unknown[]): string {
  return events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join('')
}

/**
 * Writes SSE text the way the API does: one write per event, optionally spaced in time. With
 * `cutAfter`, the socket is destroyed after that many events (a stream the provider cuts).
 */
export async function writeSseText(
  res: ServerResponse,
  text: string,
  options: { delayMs?: number; cutAfter?: number; eol?: string } = {},
): Promise<void> {
  const eol = options.eol ?? '\n\n'
  const events = text.split(eol).filter((e) => e.trim() !== '')
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' })
  res.flushHeaders()
  for (const [i, e] of events.entries()) {
    if (res.destroyed) return
    if (options.cutAfter !== undefined && i >= options.cutAfter) {
      res.socket?.destroy()
      return
    }
    await new Promise<void>((resolve) => res.write(`${e}${eol}`, () => resolve()))
    if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs))
  }
  res.end()
}

async function* once(text: string): AsyncGenerator<string> {
  yield text
}

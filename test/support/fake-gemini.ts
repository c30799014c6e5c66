import { readFileSync } from 'node:fs'
import { readSse } from '../../src/sse.ts'
import type { GeminiResponse } from '../../src/providers/gemini/wire.ts'

// Gemini's wire format for fakes and unit tests: `streamGenerateContent?alt=sse` sends
// `data: <GenerateContentResponse>` events separated by CRLF CRLF; fixtures keep those bytes.

export const GEMINI_EOL = '\r\n\r\n'

export function geminiFixture(name: string): string {
  return readFileSync(new URL(`../fixtures/gemini/${name}`, import.meta.url), 'utf8')
}

export function geminiJson(name: string): unknown {
  return JSON.parse(geminiFixture(name))
}

/** The events of an SSE fixture, parsed by the gateway's own SSE reader. */
export async function geminiEvents(name: string): Promise<GeminiResponse[]> {
  const out: GeminiResponse[] = []
  for await (const e of readSse(once(geminiFixture(name)))) out.push(JSON.parse(e.data) as GeminiResponse)
  return out
}

/** SSE text in Gemini's framing, for events a test builds itself. */
export function toGeminiSse(events: readonly unknown[]): string {
  return events.map((e) => `data: ${JSON.stringify(e)}${GEMINI_EOL}`).join('')
}

async function* once(text: string): AsyncGenerator<string> {
  yield text
}

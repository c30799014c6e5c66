import { readFileSync } from 'node:fs'
import { readSse } from './sse.ts'

// Fixtures are upstream bytes exactly as the provider sends them, under test/fixtures/<protocol>/:
// `readFixture('anthropic/text.sse')`.

export function readFixture(path: string): string {
  return readFileSync(new URL(`../fixtures/${path}`, import.meta.url), 'utf8')
}

export function readJsonFixture(path: string): unknown {
  return JSON.parse(readFixture(path))
}

/** The JSON data of each event of an SSE fixture, read by the gateway's own SSE reader. */
export async function readSseFixture(path: string): Promise<unknown[]> {
  const out: unknown[] = []
  for await (const events of readSse(once(readFixture(path))))
    for (const e of events) out.push(JSON.parse(e.data))
  return out
}

async function* once(text: string): AsyncGenerator<string> {
  yield text
}

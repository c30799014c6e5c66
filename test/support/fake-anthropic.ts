// Anthropic's SSE framing (`event: <type>\ndata: <json>\n\n`), for events a test builds itself;
// fixtures (test/fixtures/anthropic/) keep the bytes the Messages API sends.

export function toAnthropicSse(events: readonly unknown[]): string {
  return events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join('')
}

// Gemini's SSE framing: `streamGenerateContent?alt=sse` sends `data: <GenerateContentResponse>` events
// separated by CRLF CRLF; fixtures (test/fixtures/gemini/) keep those bytes.

/** SSE text in Gemini's framing, for events a test builds itself. */
export function toGeminiSse(events: readonly unknown[]): string {
  return events.map((e) => `data: ${JSON.stringify(e)}\r\n\r\n`).join('')
}

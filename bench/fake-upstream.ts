import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'

// A fast OpenAI-compatible upstream for the benchmark, run as its own process (bench/run.ts starts
// it) so it never shares an event loop with what is measured. Every answer is precomputed.
//
//   POST /v1/chat/completions            → a fixed chat.completion with usage
//   ... with "stream": true              → 100 chunk events (+ usage chunk if asked, and usage: null on the
//                                          others, as OpenAI) + [DONE], at once
//   ... held (header x-bench-hold: 1, or → headers + first chunk, then a chunk every 5 s until the
//       a user message "x-bench-hold")     client goes away (the gateway forwards bodies, not headers)

const HOLD_MARKER = 'x-bench-hold'
const STREAM_CHUNKS = 100
const HOLD_INTERVAL_MS = 5_000
const CREATED = 1_700_000_000
const MODEL = 'gpt-4o-mini'

const completionBody = JSON.stringify({
  id: 'chatcmpl-bench',
  object: 'chat.completion',
  created: CREATED,
  model: MODEL,
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Hello! How can I help you today?', refusal: null },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: { prompt_tokens: 8, completion_tokens: 9, total_tokens: 17 },
})

function chunkEvent(choices: unknown[], usage?: unknown): string {
  const chunk = {
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: CREATED,
    model: MODEL,
    choices,
    ...(usage === undefined ? {} : { usage }),
  }
  return `data: ${JSON.stringify(chunk)}\n\n`
}

/** With include_usage, OpenAI sends `"usage": null` on every chunk before the usage chunk. */
function contentEvent(i: number, usage?: null): string {
  if (i === 0)
    return chunkEvent([{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }], usage)
  if (i === STREAM_CHUNKS - 1) return chunkEvent([{ index: 0, delta: {}, finish_reason: 'stop' }], usage)
  return chunkEvent([{ index: 0, delta: { content: ` token${i}` }, finish_reason: null }], usage)
}

const contentEvents = Array.from({ length: STREAM_CHUNKS }, (_, i) => contentEvent(i))
const contentEventsWithUsage = Array.from({ length: STREAM_CHUNKS }, (_, i) => contentEvent(i, null))
const usageEvent = chunkEvent([], {
  prompt_tokens: 8,
  completion_tokens: STREAM_CHUNKS - 2,
  total_tokens: 106,
})
const doneEvent = 'data: [DONE]\n\n'

interface ChatBody {
  stream?: boolean
  stream_options?: { include_usage?: boolean }
  messages?: { content?: unknown }[]
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = []
    req.on('data', (b: Buffer) => parts.push(b))
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')))
    req.on('error', reject)
  })
}

function startEventStream(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' })
}

function sendCompletion(res: ServerResponse): void {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(completionBody)
}

function sendStream(res: ServerResponse, includeUsage: boolean): void {
  startEventStream(res)
  // The first write sends the headers and the first event together; the rest follow at once.
  for (const event of includeUsage ? contentEventsWithUsage : contentEvents) res.write(event)
  if (includeUsage) res.write(usageEvent)
  res.end(doneEvent)
}

function holdStream(res: ServerResponse): void {
  startEventStream(res)
  res.write(contentEvents[0])
  let next = 1
  const timer = setInterval(() => {
    res.write(contentEvents[next])
    next = next === STREAM_CHUNKS - 2 ? 1 : next + 1
  }, HOLD_INTERVAL_MS)
  res.on('close', () => clearInterval(timer))
}

function wantsHold(req: IncomingMessage, body: ChatBody): boolean {
  return req.headers[HOLD_MARKER] === '1' || body.messages?.some((m) => m.content === HOLD_MARKER) === true
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
    res.writeHead(404, { 'content-type': 'application/json' })
    res.end('{"error":{"message":"not found","type":"invalid_request_error"}}')
    return
  }
  let body: ChatBody
  try {
    body = JSON.parse(await readBody(req)) as ChatBody
  } catch {
    res.writeHead(400, { 'content-type': 'application/json' })
    res.end('{"error":{"message":"body is not JSON","type":"invalid_request_error"}}')
    return
  }
  if (!body.stream) sendCompletion(res)
  else if (wantsHold(req, body)) holdStream(res)
  else sendStream(res, body.stream_options?.include_usage === true)
}

const server = createServer((req, res) => {
  handle(req, res).catch(() => res.destroy())
})
server.keepAliveTimeout = 60_000
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1')
process.on('SIGTERM', () => {
  server.closeAllConnections()
  server.close(() => process.exit(0))
})

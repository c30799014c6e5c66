import { createChunkSerialiser } from '../src/inference/chunk-text.ts'
import { fromOpenAIChunk } from '../src/providers/openai-compat/response.ts'
import { createChunkTemplates } from '../src/providers/openai-compat/stream-template.ts'
import { parseOpenAIChunk } from '../src/providers/openai-compat/wire.ts'
import type { ChatChunk } from '../src/domain/chat.ts'

// One stream chunk's way from the upstream event's text to the client's SSE text, without I/O: the
// OpenAI-compatible adapter's translation, the relay's rewrites (inference/chat.ts), the Chat
// Completions serialisation. BENCH_CHUNK_MODE=slow parses, translates and serialises every event;
// fast (the default) takes the stream templates' way (openai-compat/stream-template.ts). Run it under
// callgrind with two counts and divide the difference, a figure the machine's load does not move:
//   BENCH_CHUNKS=1000 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//     node --disable-warning=ExperimentalWarning bench/chunk-cost.ts    (then BENCH_CHUNKS=51000)

const count = Number(process.env['BENCH_CHUNKS'] ?? 100_000)
const fast = process.env['BENCH_CHUNK_MODE'] !== 'slow'
// The bench's fake upstream's content event (bench/fake-upstream.ts), usage asked for upstream.
const event = (i: number): string =>
  JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta: { content: ` token${i}` }, finish_reason: null }],
    usage: null,
  })
const events = Array.from({ length: 1000 }, (_, i) => event(i))
const templates = createChunkTemplates()
const serialise = fast ? createChunkSerialiser() : (e: unknown) => JSON.stringify(e)

function slowWay(data: string): ChatChunk {
  const json = JSON.parse(data) as unknown
  const learnable = fast && templates.learnable(data, json)
  const chunk = fromOpenAIChunk(parseOpenAIChunk(json)!, 0)
  if (learnable) templates.learn(data, chunk)
  return chunk
}

function relay(chunk: ChatChunk): ChatChunk {
  chunk.id = 'gen_0123456789abcdef01234567'
  chunk.model = 'openai/gpt-4o-mini'
  if ('usage' in chunk) chunk.usage = undefined
  return chunk
}

let bytes = 0
const started = performance.now()
for (let i = 0; i < count; i++) {
  const data = events[i % events.length]!
  const chunk = (fast ? templates.match(data) : undefined) ?? slowWay(data)
  bytes += `data: ${serialise(relay(chunk))}\n\n`.length
}
const us = ((performance.now() - started) * 1000) / count
console.log(`${fast ? 'fast' : 'slow'}: ${count} chunks, ${bytes} bytes, ${us.toFixed(3)} µs a chunk`)

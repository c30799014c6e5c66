import { resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type * as LoggerModule from '../src/logger.ts'
import type * as ResponseModule from '../src/providers/openai-compat/response.ts'
import type * as WireModule from '../src/providers/openai-compat/wire.ts'

// Two pieces of every blocking request, without I/O, against the code of any checkout (BENCH_CHECKOUT,
// default this one), to count under callgrind with two counts and divide the difference, figures the
// machine's load does not move:
//   BENCH_PART=log BENCH_COUNT=20000 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//     node bench/hot-cost.ts >/dev/null       (then BENCH_COUNT=60000)
// - log: the request's log line through the gateway's logger (src/logger.ts, to stdout), four lines
//   per event-loop turn, as under load;
// - answer: the upstream's blocking answer (the bench's fake upstream's) parsed, checked, translated
//   and serialised with the route's id and model, as adapter.ts and the route do.
// Without valgrind it prints µs of CPU per piece (on stderr).

const checkout = resolve(process.env['BENCH_CHECKOUT'] ?? fileURLToPath(new URL('..', import.meta.url)))
const part = process.env['BENCH_PART'] ?? 'log'
const count = Number(process.env['BENCH_COUNT'] ?? 100_000)

async function logLines(): Promise<void> {
  const { createLogger } = (await import(`${checkout}/src/logger.ts`)) as typeof LoggerModule
  const log = createLogger('info').child({ reqId: '0123456789abcdef0123456789abcdef' })
  for (let i = 0; i < count; i += 4) {
    for (let j = 0; j < 4; j++) {
      log.info(
        {
          method: 'POST',
          route: '/v1/chat/completions',
          status: 200,
          ms: 1.3,
          generationId: 'gen-0123456789abcdefghijklmn',
          model: 'openai/gpt-4o-mini',
          provider: 'openai',
          promptTokens: 8,
          completionTokens: 9,
          cost: '0.0000071',
          firstByteMs: 1,
          attempts: 1,
        },
        'request',
      )
    }
    await new Promise((r) => setImmediate(r))
  }
}

async function answers(): Promise<number> {
  const wire = (await import(`${checkout}/src/providers/openai-compat/wire.ts`)) as typeof WireModule
  const { fromOpenAICompletion } = (await import(
    `${checkout}/src/providers/openai-compat/response.ts`
  )) as typeof ResponseModule
  const body = JSON.stringify({
    id: 'chatcmpl-bench',
    object: 'chat.completion',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
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
  // A checkout from before the hand-written check has only the schema.
  const fast = (wire as { fastOpenAICompletion?: (json: unknown) => unknown }).fastOpenAICompletion
  let bytes = 0
  for (let i = 0; i < count; i++) {
    const json = JSON.parse(body) as unknown
    const parsed = (fast?.(json) ?? wire.openAICompletionSchema.parse(json)) as Parameters<
      typeof fromOpenAICompletion
    >[0]
    const completion = fromOpenAICompletion(parsed, 0)
    bytes += JSON.stringify({ ...completion, id: 'gen-x', model: 'openai/gpt-4o-mini' }).length
  }
  return bytes
}

const started = process.cpuUsage()
if (part === 'log') await logLines()
else if (part === 'answer') await answers()
else throw new Error('BENCH_PART is log or answer')
const used = process.cpuUsage(started)
console.error(
  `${part}: ${count}, ${((used.user + used.system) / count).toFixed(3)} µs of CPU each (${checkout})`,
)

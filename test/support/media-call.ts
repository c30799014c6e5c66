import { createLogger } from '../../src/logger.ts'
import type {
  MediaAdapter,
  MediaCall,
  MediaJob,
  MediaOutput,
  MediaResult,
  MediaStep,
} from '../../src/providers/async-media/types.ts'
import type { JsonValue } from '../../src/domain/media.ts'
import type { ProviderKind } from '../../src/domain/models.ts'

// A MediaCall for driving a media adapter directly against a fake upstream on 127.0.0.1.

export interface MediaCallOptions {
  kind: ProviderKind
  baseUrl: string
  apiKey?: string
  maxOutputBytes?: number
  /** The provider's configured extra headers. */
  headers?: Record<string, string>
  upstreamModel?: string
}

export function makeMediaCall(options: MediaCallOptions): MediaCall {
  return {
    upstream: {
      name: options.kind === 'replicate' ? 'replicate' : 'openai',
      kind: options.kind,
      baseUrl: options.baseUrl,
      apiKey: options.apiKey,
      headers: options.headers ?? {},
      timeouts: { connectMs: 5_000, firstByteMs: 5_000, idleMs: 5_000, totalMs: 10_000 },
      outputLimitField: 'max_tokens',
      retry: { attemptsPerDeployment: 1, backoffMs: 0, maxBackoffMs: 0 },
      maxResponseBytes: 1024 * 1024,
      latencyMs: 0,
    },
    upstreamModel: options.upstreamModel ?? 'm',
    signal: new AbortController().signal,
    log: createLogger('silent'),
    media: {
      ffmpegPath: 'ffmpeg',
      maxOutputBytes: options.maxOutputBytes ?? 1024 * 1024,
      fetchUserMedia: () => Promise.reject(new Error('these adapters never fetch client media')),
    },
  }
}

/** All of a stream's bytes. */
export async function collect(stream: AsyncIterable<Uint8Array>): Promise<Buffer> {
  const parts: Buffer[] = []
  for await (const chunk of stream) parts.push(Buffer.from(chunk))
  return Buffer.concat(parts)
}

/** An output's bytes and content type as the keeper would store them (a source opened and read). */
export async function readOutput(o: MediaOutput): Promise<MediaOutput & { data: Buffer }> {
  if (Buffer.isBuffer(o.data)) return { ...o, data: o.data }
  const opened = await o.data.open()
  return { ...o, contentType: opened.contentType ?? o.contentType, data: await collect(opened.stream) }
}

/** A step whose outputs are bytes in hand. */
export type ReadStep =
  | Exclude<MediaStep, { state: 'done' }>
  | { state: 'done'; result: Omit<MediaResult, 'outputs'> & { outputs: (MediaOutput & { data: Buffer })[] } }

/**
 * The step an adapter answered, with a done step's outputs read (downloads and encoders run now, as
 * the keeper runs them): a download that fails rejects here.
 */
export async function readOutputs(step: Promise<MediaStep> | MediaStep): Promise<ReadStep> {
  const s = await step
  if (s.state !== 'done') return s
  const outputs = []
  for (const o of s.result.outputs) outputs.push(await readOutput(o))
  return { ...s, result: { ...s.result, outputs } }
}

/** A media adapter whose done steps come with their outputs read (readOutputs). */
export interface ReadingAdapter {
  submit(job: MediaJob, call: MediaCall): Promise<ReadStep>
  poll(job: MediaJob, state: JsonValue, call: MediaCall): Promise<ReadStep>
  cancel?(job: MediaJob, state: JsonValue, call: MediaCall): Promise<void>
}

/** `adapter` with its done steps' outputs read at once (readOutputs), for tests that look at bytes. */
export function reading(adapter: MediaAdapter): ReadingAdapter {
  return {
    submit: (job, call) => readOutputs(adapter.submit(job, call)),
    poll: (job, state, call) => readOutputs(adapter.poll(job, state, call)),
    ...(adapter.cancel ? { cancel: adapter.cancel.bind(adapter) } : {}),
  }
}

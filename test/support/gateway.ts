import type { FastifyInstance } from 'fastify'
import OpenAI from 'openai'
import { onTestFinished } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { loadConfig } from '../../src/config.ts'
import { createDeps, type Deps, type DepsOverrides } from '../../src/deps.ts'
import { createLogger } from '../../src/logger.ts'
import { startFakeUpstream, type FakeHandler, type FakeUpstream } from './fake-upstream.ts'

export interface TestGateway {
  app: FastifyInstance
  deps: Deps
  /** `http://127.0.0.1:<port>` when listening, '' for inject-only gateways. */
  origin: string
  close(): Promise<void>
}

export interface TestGatewayOptions {
  env?: Record<string, string>
  /** A GATEWAY_CONFIG file's JSON, given inline. */
  file?: unknown
  overrides?: DepsOverrides
  listen?: boolean
}

export const devAuth = { authorization: 'Bearer sk-dev' }

/** Builds the real app from env + config exactly as server.ts does, silent logs unless LOG_LEVEL is set. */
export async function startGateway(options: TestGatewayOptions = {}): Promise<TestGateway> {
  // Tests choose the memory store unless they name a database: none writes ./data/junction.db.
  const env: Record<string, string> = {
    NODE_ENV: 'test',
    GATEWAY_DATABASE_URL: 'memory',
    ...(options.env ?? {}),
  }
  if (options.file !== undefined) env.GATEWAY_CONFIG = 'inline.json'
  const config = loadConfig(env, () => JSON.stringify(options.file))
  const log = options.overrides?.log ?? createLogger(process.env.LOG_LEVEL ?? 'silent')
  const deps = await createDeps(config, { ...options.overrides, log })
  const app = await buildApp(deps)
  let origin = ''
  if (options.listen) {
    await app.listen({ host: '127.0.0.1', port: 0 })
    const addr = app.server.address()
    origin = typeof addr === 'object' && addr ? `http://127.0.0.1:${addr.port}` : ''
  } else {
    await app.ready()
  }
  return {
    app,
    deps,
    origin,
    async close() {
      await app.close()
      await deps.close()
    },
  }
}

export interface GatewayBehindFake {
  fake: FakeUpstream
  gw: TestGateway
  /** The official SDK pointed at the gateway, without retries: a test decides how many upstream calls it expects. */
  client: OpenAI
}

/**
 * A fake upstream serving `routes`, and the listening gateway in front of it with `env(fake.origin)`.
 * Both close when the test ends, the fake first: its closeAllConnections ends any upstream request
 * the gateway still holds.
 */
export async function startGatewayBehindFake(
  routes: Record<string, FakeHandler>,
  env: (origin: string) => Record<string, string>,
): Promise<GatewayBehindFake> {
  const fake = await startFakeUpstream(routes)
  const gw = await startGateway({ env: env(fake.origin), listen: true }).catch(async (err: unknown) => {
    await fake.close()
    throw err
  })
  onTestFinished(async () => {
    await fake.close()
    await gw.close()
  })
  const client = new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: 'sk-dev', maxRetries: 0 })
  return { fake, gw, client }
}

export interface ReadStream {
  chunks: OpenAI.Chat.ChatCompletionChunk[]
  /** The content deltas, concatenated. */
  content: string
  /** What ended the stream with a throw; undefined when it ended cleanly. */
  error: unknown
}

/** Reads an SDK stream (or the promise of one) to its end or to the error that ends it. */
export async function readSdkStream(
  stream:
    AsyncIterable<OpenAI.Chat.ChatCompletionChunk> | Promise<AsyncIterable<OpenAI.Chat.ChatCompletionChunk>>,
): Promise<ReadStream> {
  const out: ReadStream = { chunks: [], content: '', error: undefined }
  try {
    for await (const c of await stream) {
      out.chunks.push(c)
      out.content += c.choices[0]?.delta.content ?? ''
    }
  } catch (err) {
    out.error = err
  }
  return out
}

/** A client's POST of `body` as JSON to the listening gateway, with the dev key: plain fetch, no SDK. */
export function postJson(
  gw: TestGateway,
  path: string,
  body: unknown,
  signal?: AbortSignal,
): Promise<Response> {
  return fetch(`${gw.origin}${path}`, {
    method: 'POST',
    headers: { ...devAuth, 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  })
}

/** The generation record of `id`; a stream's is written as the stream closes, so it may take a moment. */
export async function readGeneration(
  gw: TestGateway,
  id: string,
  headers: Record<string, string> = devAuth,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
): Promise<any> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const res = await fetch(`${gw.origin}/v1/generation?id=${encodeURIComponent(id)}`, { headers })
    if (res.status === 200) return res.json()
    await new Promise((r) => setTimeout(r, 20))
  }
  throw new Error(`no generation record for ${id}`)
}

import type { ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { startFakeUpstream, type FakeUpstream } from '../support/fake-upstream.ts'
import { head, openRaw } from '../support/raw-http.ts'
import { useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// server.ts as a user runs it: a real process, real signals.

interface Running extends ServerProcess {
  /** Resolves when the server's output (stdout or stderr) matches `pattern`. */
  printed: (pattern: RegExp) => Promise<void>
}

const fakes: FakeUpstream[] = []
afterEach(async () => {
  for (const f of fakes.splice(0)) await f.close()
})
const server = useServerProcesses()
// Memory unless the test names a database: no test writes the repository's ./data/junction.db.
const run = (env: Record<string, string>): ChildProcess =>
  server.spawn({ GATEWAY_DATABASE_URL: 'memory', ...env })

async function start(env: Record<string, string>): Promise<Running> {
  const s = await server({ GATEWAY_DATABASE_URL: 'memory', ...env })
  const { child } = s
  const printed = (pattern: RegExp): Promise<void> =>
    new Promise((resolve) => {
      const check = (): void => {
        if (!pattern.test(s.output())) return
        child.stdout?.off('data', check)
        child.stderr?.off('data', check)
        resolve()
      }
      // Registered after start's own listener, so the output already holds each new piece.
      child.stdout?.on('data', check)
      child.stderr?.on('data', check)
      check()
    })
  return { ...s, printed }
}

/** An OpenAI chat chunk as the upstream streams it. */
function chunk(content: string, finish: string | null = null): string {
  return JSON.stringify({
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: finish }],
  })
}

async function exitOf(child: ChildProcess): Promise<{ code: number | null; stderr: string }> {
  let stderr = ''
  child.stderr?.on('data', (d: Buffer) => (stderr += String(d)))
  const [code] = (await once(child, 'exit')) as [number | null]
  return { code, stderr }
}

describe('the server process', () => {
  it('starts with no configuration, warns about the development key, and serves it', async () => {
    const s = await start({})
    expect(s.output()).toMatch(/sk-dev/)
    const res = await fetch(`${s.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] }),
    })
    expect(res.status).toBe(200)
  })

  it('on SIGTERM refuses new connections, answers 503 on kept-alive ones, lets an open stream finish, then exits 0', async () => {
    // The upstream holds the stream open after its first chunk until the test lets it finish.
    let finishStream!: () => void
    const streamMayFinish = new Promise<void>((resolve) => (finishStream = resolve))
    const fake = await startFakeUpstream({
      'POST /v1/chat/completions': async (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`data: ${chunk('first ')}\n\n`)
        await streamMayFinish
        res.write(`data: ${chunk('last', 'stop')}\n\n`)
        res.end('data: [DONE]\n\n')
      },
    })
    fakes.push(fake)
    const s = await start({ OPENAI_API_KEY: 'sk-upstream-test', OPENAI_BASE_URL: `${fake.origin}/v1` })

    // Three connections a client keeps alive from before the signal.
    const kept = await Promise.all([0, 1, 2].map(() => openRaw(s.origin)))
    for (const c of kept) {
      await c.send(head('GET /healthz HTTP/1.1'))
      expect((await c.response()).status).toBe(200)
    }
    const body = JSON.stringify({
      model: 'openai/gpt-4o-mini',
      messages: [{ role: 'user', content: 'hello' }],
      stream: true,
    })
    const res = await fetch(`${s.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
      body,
    })
    const reader = res.body!.getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('first ')

    const exited = once(s.child, 'exit')
    s.child.kill('SIGTERM')
    await s.printed(/shutting down/)
    // A new connection is refused...
    await expect(openRaw(s.origin)).rejects.toMatchObject({ code: 'ECONNREFUSED' })
    // ...a request on a kept-alive one is answered 503 and its connection closed...
    const [chat, ready, live] = kept as [(typeof kept)[0], (typeof kept)[0], (typeof kept)[0]]
    await chat.send(
      head('POST /v1/chat/completions HTTP/1.1', {
        authorization: 'Bearer sk-dev',
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      }) + body,
    )
    const refused = await chat.response()
    expect(refused.status).toBe(503)
    expect(JSON.parse(refused.body).error).toMatchObject({
      type: 'service_unavailable',
      code: 'shutting_down',
    })
    expect(refused.headers.connection).toBe('close')
    await chat.closed
    // ...readiness fails, liveness holds.
    await ready.send(head('GET /readyz HTTP/1.1'))
    expect((await ready.response()).status).toBe(503)
    await live.send(head('GET /healthz HTTP/1.1'))
    expect((await live.response()).status).toBe(200)
    expect(fake.requests).toHaveLength(1)

    // The stream in flight finishes whole, then the process exits cleanly.
    finishStream()
    let rest = ''
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      rest += new TextDecoder().decode(value)
    }
    expect(rest).toContain('last')
    expect(rest.trimEnd().endsWith('data: [DONE]')).toBe(true)
    const [code] = await exited
    expect(code).toBe(0)
  })

  it('on SIGTERM cuts a stream still open when the grace period ends, then exits 0', async () => {
    const fake = await startFakeUpstream({
      // Never finishes: only the grace period ends it.
      'POST /v1/chat/completions': (_req, res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' })
        res.write(`data: ${chunk('first ')}\n\n`)
      },
    })
    fakes.push(fake)
    const s = await start({
      OPENAI_API_KEY: 'sk-upstream-test',
      OPENAI_BASE_URL: `${fake.origin}/v1`,
      GATEWAY_SHUTDOWN_GRACE_MS: '200',
    })
    const res = await fetch(`${s.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'openai/gpt-4o-mini',
        messages: [{ role: 'user', content: 'hello' }],
        stream: true,
      }),
    })
    const reader = res.body!.getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('first ')
    const exited = once(s.child, 'exit')
    s.child.kill('SIGTERM')
    let rest = ''
    try {
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        rest += new TextDecoder().decode(value)
      }
    } catch {
      // The cut may surface as a terminated body.
    }
    expect(rest).not.toContain('[DONE]')
    await s.printed(/grace period over/)
    const [code] = await exited
    expect(code).toBe(0)
  })

  it('on SIGTERM writes its last log line before it exits, on the default SQLite store too', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-stop-'))
    try {
      // The SQLite store's checkpoint thread does not hold the process: the stop must, until its end.
      const s = await start({ GATEWAY_DATABASE_URL: `sqlite:${join(dir, 'junction.db')}` })
      const exited = once(s.child, 'exit')
      const drained = once(s.child.stdout!, 'close')
      s.child.kill('SIGTERM')
      const [[code]] = (await Promise.all([exited, drained])) as [[number | null], unknown]
      expect(code).toBe(0)
      const lines = s.output().trimEnd().split('\n')
      expect(JSON.parse(lines.at(-1)!)).toMatchObject({ msg: 'stopped' })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('refuses to start in production without accounts', async () => {
    const { code, stderr } = await exitOf(run({ NODE_ENV: 'production' }))
    expect(code).toBe(1)
    expect(stderr).toMatch(/accounts/)
  })

  it('a bad config file stops start-up with a message naming the field', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-'))
    const file = join(dir, 'bad.json')
    writeFileSync(file, JSON.stringify({ server: { port: 'eighty' } }))
    const { code, stderr } = await exitOf(run({ GATEWAY_CONFIG: file }))
    expect(code).toBe(1)
    expect(stderr).toMatch(/server\.port/)
  })

  it('refuses to start when a configured price cannot be charged, naming the model and the price', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-'))
    const file = join(dir, 'prices.json')
    // A chat model priced per image: every answer would be billed $0.
    writeFileSync(
      file,
      JSON.stringify({
        models: [{ slug: 'mock/painter', upstreamModel: 'chat', pricing: { imageByTier: { '1K': 0.04 } } }],
      }),
    )
    const { code, stderr } = await exitOf(run({ GATEWAY_CONFIG: file }))
    expect(code).toBe(1)
    expect(stderr).toMatch(/mock\/painter.*imageByTier is not a price of chat models/)
    expect(stderr).toMatch(/no prompt price/)
  })
})

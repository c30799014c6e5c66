import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'

// server.ts as a user runs it: a real process, real signals.

const serverPath = new URL('../../src/server.ts', import.meta.url).pathname

interface Running {
  child: ChildProcess
  origin: string
  output: () => string
}

const children: ChildProcess[] = []
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL')
})

function run(env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', serverPath], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.push(child)
  return child
}

async function start(env: Record<string, string>): Promise<Running> {
  const child = run(env)
  let out = ''
  const origin = await new Promise<string>((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += String(d)
      const m = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (m?.[1]) resolve(m[1])
    }
    child.stdout?.on('data', onData)
    child.stderr?.on('data', onData)
    child.once('exit', (code) => reject(new Error(`server exited with ${code}: ${out}`)))
  })
  return { child, origin, output: () => out }
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

  it('on SIGTERM stops accepting, lets an open stream finish, then exits 0', async () => {
    const s = await start({ MOCK_LATENCY_MS: '400' })
    const res = await fetch(`${s.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock/chat',
        messages: [{ role: 'user', content: 'hello' }],
        stream: true,
      }),
    })
    const reader = res.body!.getReader()
    const first = await reader.read()
    expect(new TextDecoder().decode(first.value)).toContain('data: ')
    const exited = once(s.child, 'exit')
    s.child.kill('SIGTERM')
    // Give the signal a moment to land, then a new connection must be refused.
    await new Promise((r) => setTimeout(r, 200))
    await expect(fetch(`${s.origin}/healthz`)).rejects.toThrow()
    let rest = ''
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      rest += new TextDecoder().decode(value)
    }
    expect(rest.trimEnd().endsWith('data: [DONE]')).toBe(true)
    const [code] = await exited
    expect(code).toBe(0)
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
})

import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { startPath, stopServer, useServerProcesses } from '../support/server-process.ts'

// `npm start` (src/start.mjs) turns on Node's compile cache for every thread: from the second start on
// no thread strips a TypeScript file again (and none loads the stripper, ≈18 MB each).

const server = useServerProcesses()
const dirs: string[] = []
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true })
})
function scratch(): string {
  const d = mkdtempSync(join(tmpdir(), 'junction-compile-cache-'))
  dirs.push(d)
  return d
}

const nodeArgs = ['--disable-warning=ExperimentalWarning']
const startAt = (cwd: string, env: Record<string, string> = {}) =>
  server({ LOG_LEVEL: 'debug', ...env }, cwd, nodeArgs, startPath)

/** The files under `dir`, at any depth. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name))
}

describe('the compile cache of npm start', () => {
  it('is filled in ./data/compile-cache (0700) while the first start runs, and the second start strips nothing in any thread', async () => {
    const cwd = scratch()
    const cache = join(cwd, 'data', 'compile-cache')
    // A stripped module's entry holds its JavaScript: each thread's entry point, by a string of its own.
    const entryPoints = [
      'junction: failed to start', // src/server.ts: the event loop
      'sqlite-worker runs as a worker thread', // the database thread
      'sqlite-checkpointer runs as a worker thread', // the checkpoint thread
    ]
    const cached = (): string[] => {
      const texts = filesUnder(cache).map((f) => readFileSync(f, 'latin1'))
      return entryPoints.filter((m) => texts.some((t) => t.includes(m)))
    }
    // The shipped defaults: a SQLite file in ./data, so the database thread runs, and the checkpoint
    // thread from the database thread's hundredth batch on: a request makes one at least.
    const first = await startAt(cwd)
    expect(first.output()).toMatch(/compile cache enabled/)
    expect((await fetch(`${first.origin}/healthz`)).status).toBe(200)
    for (let i = 0; i < 100; i++) {
      const res = await fetch(`${first.origin}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: 'Bearer sk-dev', 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }),
      })
      expect(res.status).toBe(200)
      await res.arrayBuffer()
    }
    // Each thread writes its modules once they are loaded, not only at its exit (the checkpoint thread
    // may still be loading when the event loop listens): then the process is killed.
    await vi.waitFor(() => expect(cached()).toEqual(entryPoints), { timeout: 15_000, interval: 100 })
    await stopServer(first, 'SIGKILL')
    expect(statSync(cache).mode & 0o777).toBe(0o700)
    const filled = filesUnder(cache).sort()

    const second = await startAt(cwd)
    expect((await fetch(`${second.origin}/healthz`)).status).toBe(200)
    await stopServer(second, 'SIGTERM')
    // A module not found there would have been stripped again and added.
    expect(filesUnder(cache).sort()).toEqual(filled)
  })

  it('never stops the gateway: a cache directory it cannot or must not use is logged at debug and skipped', async () => {
    const cwd = scratch()
    const notADir = join(cwd, 'a-file')
    writeFileSync(notADir, '')
    const open = join(cwd, 'world-writable')
    mkdirSync(open)
    chmodSync(open, 0o777)
    for (const dir of [notADir, join(notADir, 'below'), open]) {
      const s = await startAt(cwd, { GATEWAY_DATABASE_URL: 'memory', GATEWAY_COMPILE_CACHE: dir })
      expect(s.output()).toMatch(/compile cache failed/)
      expect((await fetch(`${s.origin}/healthz`)).status).toBe(200)
      await stopServer(s, 'SIGTERM')
    }
    expect(readdirSync(open)).toEqual([])
  })

  it('is off with GATEWAY_COMPILE_CACHE=off', async () => {
    const cwd = scratch()
    const s = await startAt(cwd, { GATEWAY_DATABASE_URL: 'memory', GATEWAY_COMPILE_CACHE: 'off' })
    expect(s.output()).toMatch(/compile cache off/)
    await stopServer(s, 'SIGTERM')
    expect(readdirSync(cwd)).toEqual([])
  })
})

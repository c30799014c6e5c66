import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
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
  it('is filled by the first start in ./data/compile-cache (0700), and the second start strips nothing in any thread', async () => {
    const cwd = scratch()
    // The shipped defaults: a SQLite file in ./data, so the database and checkpoint threads run.
    const first = await startAt(cwd)
    expect(first.output()).toMatch(/compile cache enabled/)
    await stopServer(first, 'SIGTERM')
    const cache = join(cwd, 'data', 'compile-cache')
    expect(statSync(cache).mode & 0o777).toBe(0o700)
    expect(filesUnder(cache).length).toBeGreaterThan(100)

    const second = await startAt(cwd, { NODE_DEBUG_NATIVE: 'COMPILE_CACHE' })
    expect((await fetch(`${second.origin}/healthz`)).status).toBe(200)
    const reads = second
      .output()
      .split('\n')
      .filter((l) => /^\[compile cache\] reading cache from .* for StrippedTypeScript /.test(l))
    // Each thread's entry point among them: the event loop's, the database's and the checkpoints'.
    for (const file of ['src/server.ts', 'src/store/sqlite/worker.ts', 'src/store/sqlite/checkpointer.ts'])
      expect(reads.some((l) => l.includes(file))).toBe(true)
    expect(reads.filter((l) => !/\.\.\. success, size=\d+$/.test(l))).toEqual([])
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

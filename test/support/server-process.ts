import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { afterEach, expect } from 'vitest'

// src/server.ts as a user runs it, in a child process: for tests of what only a real process shows
// (restarts, kill -9, several instances on one database).

const serverPath = new URL('../../src/server.ts', import.meta.url).pathname
/** `npm start`'s entry point: turns the compile cache on, then loads server.ts. */
export const startPath = new URL('../../src/start.mjs', import.meta.url).pathname

/**
 * A config-file model entry that prices the mock provider, so every generation costs something (an
 * unpriced mock would make billing sums trivially 0).
 */
export const pricedMockModel = {
  slug: 'mock/chat',
  provider: 'mock',
  upstreamModel: 'chat',
  pricing: { prompt: 3, completion: 7 },
} as const

export interface ServerProcess {
  child: ChildProcess
  origin: string
  /** Everything it printed so far (logs). */
  output: () => string
}

export interface StartServer {
  /** Starts one and resolves once it listens. */
  (env: Record<string, string>, cwd?: string, nodeArgs?: string[], script?: string): Promise<ServerProcess>
  /** Starts one without waiting (for a process expected to exit). */
  spawn(env: Record<string, string>, cwd?: string, nodeArgs?: string[], script?: string): ChildProcess
}

/**
 * Tracks the processes a test file starts and kills any still running after each test. Returns the
 * function that starts one.
 */
export function useServerProcesses(): StartServer {
  const children: ChildProcess[] = []
  afterEach(() => {
    for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  })
  const spawnServer = (
    env: Record<string, string>,
    cwd?: string,
    nodeArgs = ['--disable-warning=ExperimentalWarning'],
    script = serverPath,
  ): ChildProcess => {
    const child = spawn(process.execPath, [...nodeArgs, script], {
      cwd,
      env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    children.push(child)
    return child
  }
  const start = async (env: Record<string, string>, cwd?: string, nodeArgs?: string[], script?: string) => {
    const child = spawnServer(env, cwd, nodeArgs, script)
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
  return Object.assign(start, { spawn: spawnServer })
}

/** Stops the process with `signal` and waits for it to exit. */
export async function stopServer(s: ServerProcess, signal: NodeJS.Signals): Promise<void> {
  const exited = once(s.child, 'exit')
  s.child.kill(signal)
  await exited
}

/** The response's JSON body, after checking its status (the body is in the failure message). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- response bodies, checked by the tests
export async function jsonOf(res: Response | Promise<Response>, status = 200): Promise<any> {
  const r = await res
  const text = await r.text()
  expect(r.status, text).toBe(status)
  return JSON.parse(text)
}

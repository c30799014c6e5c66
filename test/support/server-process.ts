import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { afterEach, expect } from 'vitest'

// src/server.ts as a user runs it, in a child process: for tests of what only a real process shows
// (restarts, kill -9, several instances on one database).

const serverPath = new URL('../../src/server.ts', import.meta.url).pathname

export interface ServerProcess {
  child: ChildProcess
  origin: string
  /** Everything it printed so far (logs). */
  output: () => string
}

/**
 * Tracks the processes a test file starts and kills any still running after each test. Returns the
 * function that starts one (resolving once it listens).
 */
export function useServerProcesses(): (
  env: Record<string, string>,
  cwd?: string,
  nodeArgs?: string[],
) => Promise<ServerProcess> {
  const children: ChildProcess[] = []
  afterEach(() => {
    for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  })
  return async (env, cwd, nodeArgs = ['--disable-warning=ExperimentalWarning']) => {
    const child = spawn(process.execPath, [...nodeArgs, serverPath], {
      cwd,
      env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    children.push(child)
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

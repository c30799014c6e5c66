import type { Logger } from 'pino'

// What runs in the background of an instance, besides answering requests: housekeeping sweeps, the
// prediction task runner, the webhook sender. createDeps keeps them in one list, starts them all
// (unless a test drives them itself) and stops them all on close, in the list's order.

export interface BackgroundJob {
  /** For the logs: `store housekeeping`, `task runner`, … */
  name: string
  /** Starts the job; returns what stops it (resolving once its work in flight is done). */
  start(): () => Promise<void> | void
}

/**
 * A job that runs `run` every `intervalMs`, never twice at once; a failure is logged at warn and the
 * next run comes as planned. Its timer never keeps the process alive.
 */
export function everyInterval(
  name: string,
  intervalMs: number,
  run: () => Promise<unknown>,
  log: Logger,
): BackgroundJob {
  return {
    name,
    start() {
      let running: Promise<unknown> | undefined
      const timer = setInterval(() => {
        if (running) return
        running = run()
          .catch((err: unknown) => log.warn({ err, job: name }, `${name} failed`))
          .finally(() => {
            running = undefined
          })
      }, intervalMs)
      timer.unref()
      return async () => {
        clearInterval(timer)
        await running
      }
    },
  }
}

/** Starts every job; the returned function stops them one after the other, in the list's order. */
export function startJobs(jobs: readonly BackgroundJob[]): () => Promise<void> {
  const stops = jobs.map((job) => ({ name: job.name, stop: job.start() }))
  let stopped: Promise<void> | undefined
  return () => {
    stopped ??= (async () => {
      for (const s of stops) await s.stop()
    })()
    return stopped
  }
}

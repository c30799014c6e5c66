import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { everyInterval, startJobs, type BackgroundJob } from '../../src/jobs.ts'
import { createLogger } from '../../src/logger.ts'

// The background jobs' one list: each periodic job runs on its interval, never twice at once, goes on
// after a failure, and stops (waiting for a run in flight) when the list is stopped.

beforeEach(() => {
  vi.useFakeTimers()
})
afterEach(() => {
  vi.useRealTimers()
})

const log = createLogger('silent')

describe('everyInterval', () => {
  it('runs every interval, never twice at once, and goes on after a failure', async () => {
    let runs = 0
    let release: (() => void) | undefined
    const job = everyInterval(
      'sweep',
      1_000,
      () => {
        runs++
        if (runs === 1) return Promise.reject(new Error('store down'))
        return new Promise<void>((resolve) => {
          release = resolve
        })
      },
      log,
    )
    const stop = job.start()
    await vi.advanceTimersByTimeAsync(999)
    expect(runs).toBe(0)
    await vi.advanceTimersByTimeAsync(1)
    expect(runs).toBe(1)
    // The failure is logged; the next tick runs again.
    await vi.advanceTimersByTimeAsync(1_000)
    expect(runs).toBe(2)
    // Run 2 has not ended: the ticks meanwhile start nothing.
    await vi.advanceTimersByTimeAsync(5_000)
    expect(runs).toBe(2)
    let stopped = false
    const stopping = Promise.resolve(stop()).then(() => {
      stopped = true
    })
    await vi.advanceTimersByTimeAsync(0)
    expect(stopped).toBe(false)
    release?.()
    await stopping
    expect(stopped).toBe(true)
    await vi.advanceTimersByTimeAsync(10_000)
    expect(runs).toBe(2)
  })
})

describe('startJobs', () => {
  it('starts every job and stops them in the list order, once', async () => {
    const events: string[] = []
    const job = (name: string): BackgroundJob => ({
      name,
      start() {
        events.push(`start ${name}`)
        return async () => {
          events.push(`stop ${name}`)
        }
      },
    })
    const stop = startJobs([job('a'), job('b'), job('c')])
    expect(events).toEqual(['start a', 'start b', 'start c'])
    await Promise.all([stop(), stop()])
    expect(events).toEqual(['start a', 'start b', 'start c', 'stop a', 'stop b', 'stop c'])
  })
})

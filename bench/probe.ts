import { Session } from 'node:inspector/promises'
import { writeFile } from 'node:fs/promises'
import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8'
import { monitorEventLoopDelay, PerformanceObserver, constants } from 'node:perf_hooks'

// Loaded into a measured process by the bench scripts (`node --import ./bench/probe.ts ...`, with an
// IPC channel), never by the gateway itself. It answers the bench's messages:
//   { probe: 'loop-reset' }                → starts a new event-loop delay and GC window
//   { probe: 'loop-read' }                 → { delay percentiles (ms), GC pauses in the window }
//   { probe: 'profile-start', intervalUs } → starts the V8 sampling profiler on the main thread
//   { probe: 'profile-stop', path }        → stops it and writes the .cpuprofile to `path`
//   { probe: 'memory' }                    → process.memoryUsage() and the heap's spaces (bytes used)
//   { probe: 'heap-snapshot', path }       → writes a heap snapshot to `path`
// Each answer is { probe: <the command>, ...result }.

interface Command {
  probe: string
  intervalUs?: number
  path?: string
}

if (typeof process.send === 'function') {
  // 1 ms: the finest resolution the histogram is meaningful at on a busy loop.
  const delay = monitorEventLoopDelay({ resolution: 1 })
  delay.enable()
  let gc = { count: 0, totalMs: 0, maxMs: 0, major: 0 }
  const gcObserver = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gc.count++
      gc.totalMs += e.duration
      gc.maxMs = Math.max(gc.maxMs, e.duration)
      const kind = (e as { detail?: { kind?: number } }).detail?.kind
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) gc.major++
    }
  })
  gcObserver.observe({ entryTypes: ['gc'] })
  let session: Session | undefined

  const answer = async (m: Command): Promise<Record<string, unknown>> => {
    switch (m.probe) {
      case 'loop-reset':
        delay.reset()
        gc = { count: 0, totalMs: 0, maxMs: 0, major: 0 }
        return {}
      case 'loop-read': {
        const ms = (ns: number): number => ns / 1e6
        return {
          p50Ms: ms(delay.percentile(50)),
          p99Ms: ms(delay.percentile(99)),
          maxMs: ms(delay.max),
          gc: { ...gc },
        }
      }
      case 'memory': {
        // Where resident memory is: the heap's spaces, and what lives outside it (buffers, native).
        const spaces = Object.fromEntries(
          getHeapSpaceStatistics().map((sp) => [sp.space_name, sp.space_used_size]),
        )
        return { usage: process.memoryUsage(), spaces }
      }
      case 'heap-snapshot':
        if (!m.path) throw new Error('no path')
        writeHeapSnapshot(m.path)
        return {}
      case 'profile-start':
        session = new Session()
        session.connect()
        await session.post('Profiler.enable')
        await session.post('Profiler.setSamplingInterval', { interval: m.intervalUs ?? 200 })
        await session.post('Profiler.start')
        return {}
      case 'profile-stop': {
        if (!session || !m.path) throw new Error('no profile running, or no path')
        const { profile } = await session.post('Profiler.stop')
        session.disconnect()
        session = undefined
        await writeFile(m.path, JSON.stringify(profile))
        return {}
      }
      default:
        throw new Error(`unknown probe command ${m.probe}`)
    }
  }

  process.on('message', (m: Command) => {
    if (typeof m?.probe !== 'string') return
    answer(m).then(
      (result) => process.send?.({ probe: m.probe, ...result }),
      (err: unknown) => process.send?.({ probe: m.probe, error: String(err) }),
    )
  })
  // The channel must not keep the process alive: it ends as it would without the probe.
  process.channel?.unref()
}

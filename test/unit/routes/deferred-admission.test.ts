import { execFileSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'
import { DeferredAdmission } from '../../../src/routes/admission.ts'

describe('DeferredAdmission', () => {
  it('runs its check once, and is done once run or superseded', async () => {
    let calls = 0
    const ran = new DeferredAdmission(async () => {
      calls++
    })
    expect(ran.done).toBe(false)
    const first = ran.run()
    expect(ran.run()).toBe(first)
    await first
    expect(calls).toBe(1)
    expect(ran.done).toBe(true)

    const superseded = new DeferredAdmission(async () => {
      calls++
    })
    superseded.supersede()
    expect(superseded.done).toBe(true)
    expect(calls).toBe(1)
  })

  it('does not keep its request through young-generation collections', () => {
    // Every request makes one, holding the request through its check. What the young collections of
    // 50 000 of them moved to the old generation (V8's GC profiler): an object literal with a getter
    // of its own (the control) was kept through them, and so were the requests it held.
    const script = `
      import { GCProfiler } from 'node:v8'
      import { DeferredAdmission } from ${JSON.stringify(new URL('../../../src/routes/admission.ts', import.meta.url).href)}
      const literal = (check) => ({ run: () => check(), get done() { return check === undefined } })
      const make = process.argv[1] === 'literal' ? literal : (check) => new DeferredAdmission(check)
      const profiler = new GCProfiler()
      profiler.start()
      for (let i = 0; i < 50000; i++) {
        const request = { body: new Array(32).fill(i) }
        if (make(async () => request.body.length).done) throw new Error('done before it ran')
      }
      const old = (s) => s.heapSpaceStatistics.find((x) => x.spaceName === 'old_space').spaceUsedSize
      let promoted = 0
      for (const gc of profiler.stop().statistics) {
        if (gc.gcType === 'Scavenge') promoted += old(gc.afterGC) - old(gc.beforeGC)
      }
      console.log(promoted)
    `
    const promoted = (kind: string): number =>
      Number(
        execFileSync(process.execPath, ['--input-type=module', '-e', script, kind], {
          encoding: 'utf8',
        }).trim(),
      )
    const MB = 1024 * 1024
    expect(promoted('literal')).toBeGreaterThan(4 * MB)
    expect(promoted('class')).toBeLessThan(1 * MB)
  })
})

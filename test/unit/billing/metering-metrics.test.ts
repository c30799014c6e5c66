import { describe, expect, it } from 'vitest'
import { createMeteringStats } from '../../../src/billing/metering.ts'
import { createMetrics } from '../../../src/metrics.ts'

// Metering counts settle failures, retries and output overruns as plain numbers; /metrics exposes
// them as Prometheus counters read at every scrape, so an operator can alert on a charge that failed.

const value = (text: string, name: string): number | undefined => {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `))
  return line === undefined ? undefined : Number(line.split(' ')[1])
}

describe('MeteringStats on /metrics', () => {
  it('are counters whose values follow the stats at every scrape', async () => {
    const stats = createMeteringStats()
    const metrics = createMetrics({ metering: stats })
    let text = await metrics.registry.metrics()
    expect(text).toContain('# TYPE junction_settle_failures_total counter')
    expect(value(text, 'junction_settle_failures_total')).toBe(0)
    expect(value(text, 'junction_settle_retries_total')).toBe(0)
    expect(value(text, 'junction_output_overruns_total')).toBe(0)

    stats.settleFailures += 2
    stats.settleRetries += 7
    stats.outputOverruns += 1
    text = await metrics.registry.metrics()
    expect(value(text, 'junction_settle_failures_total')).toBe(2)
    expect(value(text, 'junction_settle_retries_total')).toBe(7)
    expect(value(text, 'junction_output_overruns_total')).toBe(1)
    // A second scrape reads the same numbers again (not added twice).
    text = await metrics.registry.metrics()
    expect(value(text, 'junction_settle_retries_total')).toBe(7)
  })

  it('are absent without a metering source', async () => {
    const text = await createMetrics().registry.metrics()
    expect(text).not.toContain('junction_settle_failures_total')
  })
})

import type { RoutingConfig } from './config.ts'

// What one gateway process knows about each deployment's health: a circuit breaker and a moving
// average of its time to first byte. Kept per instance, in memory, the way Envoy's outlier detection
// works: each instance judges the upstreams from its own traffic, and nothing is shared or stored.

export type BreakerState = 'closed' | 'open' | 'half_open'

export interface DeploymentHealth {
  state: BreakerState
  consecutiveFailures: number
  /** Moving average of the time to first byte, ms; undefined when never measured or stale. */
  latencyMs: number | undefined
  /** Moving average of failures among the calls that told something (0 to 1); undefined before any. */
  errorRate: number | undefined
}

export interface Health {
  /**
   * Whether a request may call the deployment now. An open breaker whose cooldown has passed lets
   * exactly one probe through (half-open) until that probe reports; then it closes or opens again.
   */
  tryAcquire(key: string): boolean
  /** Whether `tryAcquire` would let a request through, without taking the probe. */
  isAvailable(key: string): boolean
  /** The deployment answered; `ttfbMs` is its time to first byte. */
  success(key: string, ttfbMs: number): void
  /** The deployment failed in a way that counts against its health (5xx, timeout, connection). */
  failure(key: string): void
  /** The call ended without telling anything about the deployment's health (client error, client gone). */
  neutral(key: string): void
  /** Moving-average time to first byte, ms; undefined when unmeasured or older than `staleMs`. */
  latency(key: string): number | undefined
  snapshot(key: string): DeploymentHealth
}

interface Entry {
  failures: number
  openedAt: number | undefined
  probing: boolean
  latency: number | undefined
  measuredAt: number
  /** Failures (1) and successes (0), averaged with the latency's alpha. */
  errorRate: number | undefined
}

/** The key of a deployment in health and round-robin state. */
export const healthKey = (slug: string, deploymentId: string): string => `${slug}|${deploymentId}`

export function createHealth(config: RoutingConfig, now: () => number = Date.now): Health {
  const entries = new Map<string, Entry>()
  const { failureThreshold, cooldownMs } = config.breaker
  const { alpha, staleMs } = config.latency

  const entry = (key: string): Entry => {
    let e = entries.get(key)
    if (!e) {
      e = {
        failures: 0,
        openedAt: undefined,
        probing: false,
        latency: undefined,
        measuredAt: 0,
        errorRate: undefined,
      }
      entries.set(key, e)
    }
    return e
  }
  const state = (e: Entry | undefined): BreakerState => {
    if (!e || e.openedAt === undefined) return 'closed'
    return now() - e.openedAt >= cooldownMs ? 'half_open' : 'open'
  }

  const health: Health = {
    tryAcquire(key) {
      const e = entries.get(key)
      const s = state(e)
      if (s === 'closed') return true
      if (s === 'open' || !e || e.probing) return false
      e.probing = true
      return true
    },
    isAvailable(key) {
      const e = entries.get(key)
      const s = state(e)
      return s === 'closed' || (s === 'half_open' && !e?.probing)
    },
    success(key, ttfbMs) {
      const e = entry(key)
      e.failures = 0
      e.errorRate = (1 - alpha) * (e.errorRate ?? 0)
      e.openedAt = undefined
      e.probing = false
      const fresh = e.latency !== undefined && now() - e.measuredAt < staleMs
      e.latency = fresh ? alpha * ttfbMs + (1 - alpha) * (e.latency as number) : ttfbMs
      e.measuredAt = now()
    },
    failure(key) {
      const e = entry(key)
      e.failures++
      e.errorRate = alpha + (1 - alpha) * (e.errorRate ?? 0)
      // A failed probe opens it again for a full cooldown, as does reaching the threshold.
      if (e.probing || e.failures >= failureThreshold) e.openedAt = now()
      e.probing = false
    },
    neutral(key) {
      const e = entries.get(key)
      if (e) e.probing = false
    },
    latency(key) {
      const e = entries.get(key)
      if (!e || e.latency === undefined || now() - e.measuredAt >= staleMs) return undefined
      return e.latency
    },
    snapshot(key) {
      const e = entries.get(key)
      return {
        state: state(e),
        consecutiveFailures: e?.failures ?? 0,
        latencyMs: health.latency(key),
        errorRate: e?.errorRate,
      }
    },
  }
  return health
}

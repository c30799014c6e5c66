import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

// What an operator graphs and alerts on, in the Prometheus text format (GET /metrics, behind the
// admin key). prom-client keeps the numbers in memory per process: each instance is scraped on its own.

export interface Metrics {
  registry: Registry
  /** Every HTTP answer: route (the pattern, never the raw URL), model, provider, status. */
  requests: Counter<'route' | 'model' | 'provider' | 'status'>
  /** Request received → answer ended, seconds. */
  duration: Histogram<'route'>
  /** Request received → first byte of the upstream's answer, seconds. */
  ttfb: Histogram<'model' | 'provider'>
  /** Upstream calls that failed, by provider and the error code they mapped to. */
  upstreamErrors: Counter<'provider' | 'code'>
  tokens: Counter<'model' | 'kind'>
  /** Cost charged (after discount), USD. */
  cost: Counter<'model'>
  openStreams: Gauge
  /** Credits this instance's running requests hold, USD. */
  reserved: Gauge
  /** What upstream usage priced beyond what its requests could be charged (billing/overage.ts), USD. */
  unbilledOverage: Counter<'model'>
  /** The tokens that unbilled overage stands for. */
  unbilledOverageTokens: Counter<'model'>
}

/**
 * What metering counts in plain numbers (billing/metering.ts's MeteringStats; the hot path increments
 * them without a label lookup). Read at every scrape into the `junction_settle_*` and
 * `junction_output_overruns_total` counters.
 */
export interface MeteringCounts {
  readonly settleFailures: number
  readonly settleRetries: number
  readonly outputOverruns: number
}

export interface MetricSources {
  metering?: MeteringCounts
}

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

/** A counter whose value is read from `read()` when scraped (it only ever grows there). */
function readCounter(name: string, help: string, read: () => number, registers: Registry[]): void {
  new Counter({
    name,
    help,
    registers,
    collect() {
      this.reset()
      this.inc(read())
    },
  })
}

export function createMetrics(sources: MetricSources = {}): Metrics {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry, prefix: 'junction_' })
  const registers = [registry]
  const metering = sources.metering
  if (metering) {
    readCounter(
      'junction_settle_failures_total',
      'Charges that could not be committed after every retry (logged as UNSETTLED GENERATION with the record to replay)',
      () => metering.settleFailures,
      registers,
    )
    readCounter(
      'junction_settle_retries_total',
      'Charge attempts that failed and were retried',
      () => metering.settleRetries,
      registers,
    )
    readCounter(
      'junction_output_overruns_total',
      'Answers whose upstream went past the output limit it was sent (cut, charged at most the hold)',
      () => metering.outputOverruns,
      registers,
    )
  }
  return {
    registry,
    requests: new Counter({
      name: 'junction_requests_total',
      help: 'HTTP requests answered, by route pattern, model, provider and status',
      labelNames: ['route', 'model', 'provider', 'status'],
      registers,
    }),
    duration: new Histogram({
      name: 'junction_request_duration_seconds',
      help: 'Time from request to the end of its answer',
      labelNames: ['route'],
      buckets: SECONDS,
      registers,
    }),
    ttfb: new Histogram({
      name: 'junction_time_to_first_byte_seconds',
      help: "Time from request to the first byte of the upstream's answer",
      labelNames: ['model', 'provider'],
      buckets: SECONDS,
      registers,
    }),
    upstreamErrors: new Counter({
      name: 'junction_upstream_errors_total',
      help: 'Upstream calls that failed, by provider and error code',
      labelNames: ['provider', 'code'],
      registers,
    }),
    tokens: new Counter({
      name: 'junction_tokens_total',
      help: 'Tokens billed, by model and kind (prompt, completion)',
      labelNames: ['model', 'kind'],
      registers,
    }),
    cost: new Counter({
      name: 'junction_cost_usd_total',
      help: 'Cost charged to accounts after discount, USD, by model',
      labelNames: ['model'],
      registers,
    }),
    openStreams: new Gauge({
      name: 'junction_open_streams',
      help: 'Streamed answers being sent now',
      registers,
    }),
    reserved: new Gauge({
      name: 'junction_reserved_credits_usd',
      help: "Credits held by this instance's running requests, USD",
      registers,
    }),
    unbilledOverage: new Counter({
      name: 'junction_unbilled_overage_usd_total',
      help: 'Cost the upstream usage priced beyond what its requests could be charged (hold plus overdraft), USD, by model',
      labelNames: ['model'],
      registers,
    }),
    unbilledOverageTokens: new Counter({
      name: 'junction_unbilled_overage_tokens_total',
      help: 'Tokens of the unbilled overage, by model',
      labelNames: ['model'],
      registers,
    }),
  }
}

/**
 * `junction_store_statements_total{kind}`: the statements a database backend sent, by kind (its
 * prepared statement's name, `query` for the rest), read from the store when scraped. A statement of
 * a batch counts once however many calls it carries: per request it is the load-independent cost.
 */
export function trackStoreStatements(metrics: Metrics, read: () => ReadonlyMap<string, number>): void {
  new Counter({
    name: 'junction_store_statements_total',
    help: 'Statements sent to the database (one per batch of calls), by kind',
    labelNames: ['kind'],
    registers: [metrics.registry],
    collect() {
      this.reset()
      for (const [kind, n] of read()) this.inc({ kind }, n)
    },
  })
}

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type Aggregator } from 'prom-client'

// What an operator graphs and alerts on, in the Prometheus text format (GET /metrics, behind the
// admin key). prom-client keeps the numbers in memory per process: each instance is scraped on its own.

export interface Metrics {
  registry: Registry
  /** Every HTTP answer: route (the pattern, never the raw URL), model, provider, status. */
  requests: TallyCounter<'route' | 'model' | 'provider' | 'status'>
  /** Request received → answer ended, seconds. */
  duration: TallyHistogram<'route'>
  /** Request received → first byte of the upstream's answer, seconds. */
  ttfb: TallyHistogram<'model' | 'provider'>
  /** Upstream calls that failed, by provider and the error code they mapped to. */
  upstreamErrors: Counter<'provider' | 'code'>
  tokens: TallyCounter<'model' | 'kind'>
  /** Cost charged (after discount), USD. */
  cost: TallyCounter<'model'>
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

type Label = string | number

/**
 * Labelled series found by their label values, one Map level per label (at most four): a call finds its
 * series without building a key string or a labels object, where prom-client hashes a labels object
 * and checks its names on every call. The labels object is made once, for the scrape.
 */
class SeriesTree<C> {
  private readonly root = new Map<Label, unknown>()
  private readonly names: readonly string[]
  private readonly create: () => C
  readonly series: { labels: Record<string, Label>; cell: C }[] = []

  constructor(names: readonly string[], create: () => C) {
    this.names = names
    this.create = create
    if (names.length < 1 || names.length > 4) throw new Error('a tallied series has 1 to 4 labels')
  }

  at(a: Label, b: Label = '', c: Label = '', d: Label = ''): C {
    const depth = this.names.length
    let map = this.root
    for (let i = 0; i < depth - 1; i++) {
      const value = i === 0 ? a : i === 1 ? b : c
      let next = map.get(value) as Map<Label, unknown> | undefined
      if (next === undefined) {
        next = new Map()
        map.set(value, next)
      }
      map = next
    }
    const last = depth === 1 ? a : depth === 2 ? b : depth === 3 ? c : d
    let cell = map.get(last) as C | undefined
    if (cell === undefined) {
      cell = this.create()
      map.set(last, cell)
      const values = [a, b, c, d]
      const labels: Record<string, Label> = {}
      this.names.forEach((name, i) => (labels[name] = values[i]!))
      this.series.push({ labels, cell })
    }
    return cell
  }
}

type HistogramValues<L extends string> = Awaited<ReturnType<Histogram<L>['get']>>

interface TallyConfig<L extends string> {
  name: string
  help: string
  labelNames: readonly L[]
  registers: Registry[]
}

/**
 * A counter whose series the request path counts in plain numbers (`add`, label values in the order
 * of `labelNames`); they are written into prom-client's counter at every scrape. Counted only by `add`:
 * the scrape replaces what `inc` would have added.
 */
export class TallyCounter<L extends string> extends Counter<L> {
  private readonly tally: SeriesTree<{ value: number }>

  constructor(config: TallyConfig<L>) {
    super({
      ...config,
      collect() {
        const self = this as TallyCounter<L>
        self.reset()
        for (const { labels, cell } of self.tally.series)
          self.inc(labels as Partial<Record<L, Label>>, cell.value)
      },
    })
    this.tally = new SeriesTree(config.labelNames, () => ({ value: 0 }))
  }

  add(by: number, a: Label, b?: Label, c?: Label, d?: Label): void {
    if (!Number.isFinite(by) || by < 0) throw new TypeError(`a counter only grows (got ${by})`)
    this.tally.at(a, b, c, d).value += by
  }
}

/**
 * A histogram whose series the request path counts in plain numbers (`observeAt`, label values in the
 * order of `labelNames`), read at every scrape in the form prom-client's own histogram gives (cumulative
 * buckets `le` first, then `+Inf`, `_sum` and `_count`). Observed only through `observeAt`.
 */
export class TallyHistogram<L extends string> extends Histogram<L> {
  private readonly bounds: readonly number[]
  private readonly tally: SeriesTree<{ buckets: number[]; sum: number; count: number }>

  constructor(config: TallyConfig<L> & { buckets: readonly number[] }) {
    super({ ...config, buckets: [...config.buckets] })
    const bounds = [...config.buckets].sort((x, y) => x - y)
    this.bounds = bounds
    this.tally = new SeriesTree(config.labelNames, () => ({
      buckets: bounds.map(() => 0),
      sum: 0,
      count: 0,
    }))
  }

  observeAt(value: number, a: Label, b?: Label, c?: Label, d?: Label): void {
    if (!Number.isFinite(value)) throw new TypeError(`not a finite number: ${value}`)
    const cell = this.tally.at(a, b, c, d)
    const bounds = this.bounds
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        cell.buckets[i]!++
        break
      }
    }
    cell.sum += value
    cell.count++
  }

  override get(): Promise<HistogramValues<L>> {
    const self = this as unknown as { name: string; help: string; aggregator: Aggregator }
    const values: {
      labels: Record<string, Label>
      value: number
      metricName: string
      exemplar?: null
    }[] = []
    for (const { labels, cell } of this.tally.series) {
      let cumulative = 0
      this.bounds.forEach((le, i) => {
        cumulative += cell.buckets[i]!
        values.push({
          labels: { le, ...labels },
          value: cumulative,
          metricName: `${self.name}_bucket`,
          exemplar: null,
        })
      })
      values.push({
        labels: { le: '+Inf', ...labels },
        value: cell.count,
        metricName: `${self.name}_bucket`,
        exemplar: null,
      })
      values.push({ labels: { ...labels }, value: cell.sum, metricName: `${self.name}_sum` })
      values.push({ labels: { ...labels }, value: cell.count, metricName: `${self.name}_count` })
    }
    return Promise.resolve({
      name: self.name,
      help: self.help,
      type: 'histogram',
      aggregator: self.aggregator,
      values,
    } as unknown as HistogramValues<L>)
  }

  /** The registry's text output reads this when present: the same values. */
  getForPromString(): Promise<HistogramValues<L>> {
    return this.get()
  }
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
    requests: new TallyCounter({
      name: 'junction_requests_total',
      help: 'HTTP requests answered, by route pattern, model, provider and status',
      labelNames: ['route', 'model', 'provider', 'status'],
      registers,
    }),
    duration: new TallyHistogram({
      name: 'junction_request_duration_seconds',
      help: 'Time from request to the end of its answer',
      labelNames: ['route'],
      buckets: SECONDS,
      registers,
    }),
    ttfb: new TallyHistogram({
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
    tokens: new TallyCounter({
      name: 'junction_tokens_total',
      help: 'Tokens billed, by model and kind (prompt, completion)',
      labelNames: ['model', 'kind'],
      registers,
    }),
    cost: new TallyCounter({
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

/**
 * `junction_spare_holds` and `junction_spare_held_usd`: the holds this instance took ahead for busy
 * accounts and no request uses yet (billing/spare-holds.ts), read when scraped.
 */
export function trackSpareHolds(metrics: Metrics, read: () => { holds: number; usd: number }): void {
  new Gauge({
    name: 'junction_spare_holds',
    help: 'Credit holds this instance took ahead for busy accounts, not used by a request yet',
    registers: [metrics.registry],
    collect() {
      this.set(read().holds)
    },
  })
  new Gauge({
    name: 'junction_spare_held_usd',
    help: 'Credits held by the holds this instance took ahead (junction_spare_holds), USD',
    registers: [metrics.registry],
    collect() {
      this.set(read().usd)
    },
  })
}

import uPlot from '../vendor/uplot.js'
import { h, usd } from './dom.js'

// Spend per day as stacked bars, one colour per model, with uPlot. uPlot draws bars from zero, so
// each model's series is the running sum of the models before it, drawn largest first: the smaller
// sums paint over the larger and the bars look stacked. The legend shows each model's own amount.

const PALETTE = ['#3b82f6', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#06b6d4', '#ec4899', '#84cc16']
const DAY = 86_400

/** Rows of an activity report → days (Unix seconds), models, and cost[model][day]. */
export function toSeries(report) {
  const first = Date.parse(`${report.since}T00:00:00Z`) / 1000
  const days = Array.from({ length: report.days }, (_, i) => first + i * DAY)
  const models = [...new Set(report.data.map((r) => r.model))].sort()
  const cost = models.map(() => days.map(() => 0))
  for (const r of report.data) {
    const d = Math.round((Date.parse(`${r.date}T00:00:00Z`) / 1000 - first) / DAY)
    const m = models.indexOf(r.model)
    if (d >= 0 && d < days.length) cost[m][d] += r.cost
  }
  return { days, models, cost }
}

const cssVar = (name, fallback) =>
  getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback

/** The chart in a figure, with its total (the sum of what it draws) in a caption. */
export function spendChart(report) {
  const { days, models, cost } = toSeries(report)
  const drawnTotal = cost.flat().reduce((a, b) => a + b, 0)
  const holder = h('div', {
    class: 'chart',
    role: 'img',
    'aria-label': `Spend per day over ${report.days} days`,
  })
  const caption = h(
    'figcaption',
    {},
    'Total over ',
    String(report.days),
    ' days: ',
    h('strong', { dataset: { testid: 'chart-total' } }, usd(report.total_cost)),
    ` in ${report.total_requests} requests`,
  )
  const figure = h(
    'figure',
    { class: 'chart-figure', dataset: { drawnTotal: String(drawnTotal) } },
    holder,
    caption,
  )
  if (models.length === 0) {
    holder.append(h('p', { class: 'muted chart-empty' }, 'No spend in this period.'))
    return { figure, destroy() {} }
  }
  const stacked = models.map((_, m) => days.map((_, d) => cost.slice(0, m + 1).reduce((a, c) => a + c[d], 0)))
  const order = models.map((_, m) => m).reverse()
  const axisColor = cssVar('--muted', '#666')
  const gridColor = cssVar('--line', '#ddd')
  const bars = uPlot.paths.bars({ size: [0.7, 40] })
  const opts = {
    width: 600,
    height: 260,
    legend: { live: true },
    cursor: { points: { show: false } },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    axes: [
      { stroke: axisColor, grid: { stroke: gridColor }, ticks: { stroke: gridColor } },
      {
        stroke: axisColor,
        grid: { stroke: gridColor },
        ticks: { stroke: gridColor },
        size: 70,
        values: (_u, ticks) => ticks.map((v) => usd(v)),
      },
    ],
    series: [
      { value: (_u, v) => (v === null ? '' : new Date(v * 1000).toISOString().slice(0, 10)) },
      ...order.map((m) => ({
        label: models[m],
        fill: PALETTE[m % PALETTE.length],
        stroke: PALETTE[m % PALETTE.length],
        paths: bars,
        points: { show: false },
        value: (_u, _v, _s, idx) => (idx === null || idx === undefined ? '' : usd(cost[m][idx])),
      })),
    ],
  }
  const plot = new uPlot(opts, [days, ...order.map((m) => stacked[m])], holder)
  // Follows the width of its box (phone or desktop).
  const resize = new ResizeObserver(() => {
    const width = Math.max(240, Math.floor(holder.clientWidth))
    if (width !== plot.width) plot.setSize({ width, height: width < 480 ? 200 : 260 })
  })
  resize.observe(holder)
  return {
    figure,
    destroy() {
      resize.disconnect()
      plot.destroy()
    },
  }
}

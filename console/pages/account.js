import { api, describeError } from '../lib/api.js'
import { spendChart } from '../lib/chart.js'
import { h, int, percent, stat, table, usd, when } from '../lib/dom.js'
import { localPages, mediaPreview, pager, periodPicker } from '../lib/ui.js'

// The pages of an account: overview (balance, reservations, spend), generations and one generation,
// files, predictions with their outputs, webhooks.

/** Credits, the spend chart of 7/30/90 days, and spend by model. `base` is the account's API root. */
export async function spendSection(ctx, activityPath, initialDays = 30) {
  const section = h('section', { 'aria-labelledby': 'spend-title' })
  let chart
  const draw = async (days) => {
    const report = await api(`${activityPath}?days=${days}`)
    chart?.destroy()
    chart = spendChart(report)
    ctx.onLeave(() => chart?.destroy())
    const byModel = new Map()
    for (const r of report.data) {
      const m = byModel.get(r.model) ?? { requests: 0, prompt: 0, completion: 0, cost: 0 }
      m.requests += r.requests
      m.prompt += r.prompt_tokens
      m.completion += r.completion_tokens
      m.cost += r.cost
      byModel.set(r.model, m)
    }
    const rows = [...byModel.entries()]
      .sort((a, b) => b[1].cost - a[1].cost)
      .map(([model, m]) => {
        const bar = h('span', { class: 'share' })
        bar.style.width = `${report.total_cost > 0 ? Math.max(1, (m.cost / report.total_cost) * 100) : 0}%`
        return [
          model,
          int(m.requests),
          `${int(m.prompt)} / ${int(m.completion)}`,
          h('span', { class: 'share-cell' }, usd(m.cost), bar),
        ]
      })
    section.replaceChildren(
      h(
        'div',
        { class: 'section-head' },
        h('h2', { id: 'spend-title' }, 'Spend'),
        periodPicker(days, (d) => void draw(d).catch(ctx.fail)),
      ),
      chart.figure,
      table('Spend by model', ['Model', 'Requests', 'Tokens in / out', 'Cost'], rows, {
        empty: 'No spend in this period.',
      }),
    )
  }
  await draw(initialDays)
  return section
}

export async function overviewPage(ctx) {
  // Both at once: the page shows when the slower one is in.
  const [account, spend] = await Promise.all([api('/v1/account'), spendSection(ctx, '/v1/activity')])
  const c = account.credits
  return [
    h('h1', {}, account.name),
    h(
      'div',
      { class: 'stats' },
      stat('Balance', usd(c.balance), 'balance'),
      stat('Held by requests in flight', usd(c.reserved), 'reserved'),
      stat('Available now', usd(c.available), 'available'),
      stat('Used so far', usd(c.total_usage)),
      stat('Discount', percent(account.discount_percent)),
    ),
    spend,
  ]
}

/** Generation rows: time, model, provider, tokens, cost, cost source, attempts, latency. */
export function generationRows(records, link) {
  return records.map((g) =>
    h(
      'tr',
      { dataset: { generation: g.generationId } },
      h('td', {}, h('a', { href: link(g.generationId) }, when(g.createAt))),
      h('td', {}, g.model),
      h('td', {}, g.provider),
      h('td', { class: 'num' }, `${int(g.usage.prompt_tokens)} / ${int(g.usage.completion_tokens)}`),
      h('td', { class: 'num' }, usd(g.usage.cost)),
      h('td', {}, g.cost_source),
      h('td', { class: 'num' }, String(g.attempts.length)),
      h('td', { class: 'num' }, `${int(g.latency)} ms`),
    ),
  )
}

export const GENERATION_HEADERS = [
  'Time',
  'Model',
  'Provider',
  'Tokens in / out',
  'Cost',
  'Cost source',
  'Attempts',
  'First byte',
]

/** A cursor-paged generation list with a model filter; `path` answers `{data, next_cursor}`. */
export async function generationList(ctx, path, link) {
  const box = h('div')
  const cursors = [undefined]
  const models = (
    await api(`${path.replace(/generations$/, 'activity')}?days=90`).catch(() => ({ data: [] }))
  ).data
  const filter = h(
    'select',
    { id: 'model-filter', onchange: () => void load(0) },
    h('option', { value: '' }, 'All models'),
    [...new Set(models.map((r) => r.model))].sort().map((m) => h('option', { value: m }, m)),
  )
  const load = async (page) => {
    if (page === 0) cursors.length = 1
    const q = new URLSearchParams({ limit: '20' })
    if (filter.value) q.set('model', filter.value)
    if (cursors[page]) q.set('before', cursors[page])
    const res = await api(`${path}?${q}`)
    cursors[page + 1] = res.next_cursor ?? undefined
    box.replaceChildren(
      h('div', { class: 'filters' }, h('label', { for: 'model-filter' }, 'Model'), filter),
      table('Generations', GENERATION_HEADERS, generationRows(res.data, link), { empty: 'No generations.' }),
      pager({
        page: page + 1,
        hasOlder: Boolean(res.next_cursor),
        onOlder: () => void load(page + 1).catch(ctx.fail),
        onNewer: () => void load(Math.max(0, page - 1)).catch(ctx.fail),
      }),
    )
  }
  await load(0)
  return box
}

export async function generationsPage(ctx) {
  return [
    h('h1', {}, 'Generations'),
    await generationList(ctx, '/v1/generations', (id) => `#/generation/${encodeURIComponent(id)}`),
  ]
}

export function generationDetail(g) {
  const u = g.usage
  const rows = [
    ['Generation', h('code', {}, g.generationId)],
    ['Time', when(g.createAt)],
    ['API', g.api],
    ['Model', g.model],
    ['Provider', g.provider],
    [
      'Key',
      g.key_hash
        ? h('code', { title: 'the SHA-256 of the key that made it' }, `${g.key_hash.slice(0, 16)}…`)
        : '—',
    ],
    ['Streamed', g.streamed ? 'yes' : 'no'],
    ['Finish reason', g.finishReason ?? '—'],
    ['Cancelled by the client', g.cancelled ? 'yes' : 'no'],
    ['Prompt tokens', int(u.prompt_tokens)],
    ['Completion tokens', int(u.completion_tokens)],
    ['Cached prompt tokens', int(u.prompt_tokens_details?.cached_tokens)],
    ['Reasoning tokens', int(u.completion_tokens_details?.reasoning_tokens)],
    ['Upstream cost', usd(u.upstream_cost)],
    ['Discount', `${usd(u.discount)} (${percent(u.discount_percent)})`],
    ['Cost', h('strong', { dataset: { testid: 'generation-cost' } }, usd(u.cost))],
    ['Cost source', g.cost_source],
    ['Time to first byte', `${int(g.latency)} ms`],
    ['Generation time', `${int(g.generationTime)} ms`],
  ]
  return [
    h(
      'dl',
      { class: 'details' },
      rows.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]),
    ),
    h('h2', {}, 'Attempts'),
    table(
      'Attempts',
      ['Started', 'Provider', 'Deployment', 'Model', 'Status', 'Outcome', 'Duration'],
      g.attempts.map((a) => [
        when(a.startedAt),
        a.provider,
        a.deployment,
        a.model,
        a.status ?? '—',
        a.outcome,
        `${int(a.durationMs)} ms`,
      ]),
      { empty: 'No upstream call was recorded.' },
    ),
  ]
}

export async function generationPage(ctx) {
  const id = ctx.params[0] ?? ''
  const g = await api(`/v1/generation?id=${encodeURIComponent(id)}`)
  return [
    h('p', {}, h('a', { href: '#/generations' }, '← Generations')),
    h('h1', {}, 'Generation'),
    generationDetail(g),
  ]
}

export async function filesPage() {
  const files = (await api('/v1/files')).data
  return [
    h('h1', {}, 'Files'),
    localPages(files, 20, (items) =>
      table(
        'Files',
        ['Name', 'Id', 'Purpose', 'Size', 'Uploaded'],
        items.map((f) => [
          f.filename,
          h('code', {}, f.id),
          f.purpose,
          `${int(f.bytes)} bytes`,
          when(f.created_at),
        ]),
        { empty: 'No files.' },
      ),
    ),
  ]
}

export async function predictionsPage(ctx) {
  const box = h('div')
  const cursors = [undefined]
  const load = async (page) => {
    const q = new URLSearchParams({ limit: '10' })
    if (cursors[page]) q.set('before', cursors[page])
    const res = await api(`/v1/predictions?${q}`)
    cursors[page + 1] = res.next_cursor ?? undefined
    box.replaceChildren(
      res.data.length === 0 ? h('p', { class: 'muted' }, 'No prediction tasks yet.') : '',
      h(
        'ul',
        { class: 'cards' },
        res.data.map((t) =>
          h(
            'li',
            { class: 'card', dataset: { task: t.id } },
            h(
              'div',
              { class: 'card-head' },
              h('strong', {}, t.model),
              h('span', { class: `badge badge-${t.status}` }, t.status),
            ),
            h(
              'div',
              { class: 'muted small' },
              h('code', {}, t.id),
              ' · ',
              when(t.created_at),
              t.usage ? ` · ${usd(t.usage.cost)}` : '',
            ),
            t.error ? h('p', { class: 'error' }, `${t.error.code}: ${t.error.message}`) : '',
            t.output.length ? h('div', { class: 'previews' }, t.output.map(mediaPreview)) : '',
          ),
        ),
      ),
      pager({
        page: page + 1,
        hasOlder: Boolean(res.next_cursor),
        onOlder: () => void load(page + 1).catch(ctx.fail),
        onNewer: () => void load(Math.max(0, page - 1)).catch(ctx.fail),
      }),
    )
  }
  await load(0)
  return [h('h1', {}, 'Predictions'), box]
}

export async function webhooksPage() {
  const secretBox = h('div', { class: 'secret' })
  const reveal = h(
    'button',
    {
      type: 'button',
      onclick: async () => {
        try {
          const s = await api('/v1/webhooks/secret')
          secretBox.replaceChildren(h('code', { dataset: { testid: 'webhook-secret' } }, s.secret))
          reveal.hidden = true
        } catch (err) {
          secretBox.replaceChildren(h('p', { class: 'error' }, describeError(err)))
        }
      },
    },
    'Show the signing secret',
  )
  const deliveries = (await api('/v1/webhooks/deliveries?limit=50')).data
  return [
    h('h1', {}, 'Webhooks'),
    h(
      'p',
      { class: 'muted' },
      'Finished prediction tasks are posted to their webhook, signed with this secret.',
    ),
    reveal,
    secretBox,
    h('h2', {}, 'Last deliveries'),
    localPages(deliveries, 10, (items) =>
      table(
        'Last deliveries',
        ['Created', 'Task', 'URL', 'Status', 'Attempts', 'Last error'],
        items.map((d) => [
          when(d.created_at),
          h('code', {}, d.task_id),
          d.url,
          d.status,
          String(d.attempts),
          d.last_error ?? '—',
        ]),
        { empty: 'No deliveries yet.' },
      ),
    ),
  ]
}

import { api, describeError } from '../lib/api.js'
import { h, int, percent, stat, table, usd, when } from '../lib/dom.js'
import { localPages, status } from '../lib/ui.js'
import { generationDetail, generationList, spendSection } from './account.js'

// The operator's pages (admin key): accounts with balance and usage, one account (top-ups, discount,
// keys, spend, generations), and the models in service with prices and each deployment's health.

const accountLink = (id) => `#/admin/account/${encodeURIComponent(id)}`

export async function accountsPage() {
  const accounts = (await api('/admin/accounts')).data
  return [
    h('h1', {}, 'Accounts'),
    localPages(accounts, 20, (items) =>
      table(
        'Accounts',
        ['Account', 'Balance', 'Held', 'Used', 'Credits', 'Discount', 'Created'],
        items.map((a) =>
          h(
            'tr',
            { dataset: { account: a.id } },
            h(
              'td',
              {},
              h('a', { href: accountLink(a.id) }, a.name),
              h('div', { class: 'muted small' }, a.id),
            ),
            h('td', { class: 'num', dataset: { testid: 'balance' } }, usd(a.credits.balance)),
            h('td', { class: 'num' }, usd(a.credits.reserved)),
            h('td', { class: 'num' }, usd(a.credits.total_usage)),
            h('td', { class: 'num' }, usd(a.credits.total_credits)),
            h('td', {}, percent(a.discount_percent)),
            h('td', {}, when(a.created_at)),
          ),
        ),
        { empty: 'No accounts.' },
      ),
    ),
  ]
}

function topUpForm(id, onDone) {
  const amount = h('input', {
    id: 'top-up',
    name: 'amount',
    type: 'number',
    min: '0.01',
    step: '0.01',
    required: true,
    inputmode: 'decimal',
  })
  const note = status()
  return h(
    'form',
    {
      class: 'inline-form',
      'aria-label': 'Top up',
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const c = await api(`/admin/accounts/${encodeURIComponent(id)}/credits`, {
            method: 'POST',
            body: { amount: Number(amount.value) },
          })
          note.textContent = `Added ${usd(Number(amount.value))}; the balance is now ${usd(c.balance)}.`
          amount.value = ''
          await onDone()
        } catch (err) {
          note.textContent = describeError(err)
        }
      },
    },
    h('label', { for: 'top-up' }, 'Top up (USD)'),
    amount,
    h('button', { type: 'submit' }, 'Add credits'),
    note,
  )
}

function discountForm(account, onDone) {
  const rate = h('input', {
    id: 'discount',
    type: 'number',
    min: '0',
    max: '100',
    step: '0.1',
    required: true,
    value: String(Math.round(account.discount_percent * 1000) / 10),
  })
  const model = h('input', { id: 'discount-model', placeholder: 'every model', maxlength: '200' })
  const note = status()
  return h(
    'form',
    {
      class: 'inline-form',
      'aria-label': 'Discount',
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const body = {
            discount_percent: Number(rate.value) / 100,
            ...(model.value.trim() ? { model: model.value.trim() } : {}),
          }
          await api(`/admin/accounts/${encodeURIComponent(account.id)}/discount`, { method: 'PUT', body })
          note.textContent = 'Discount saved.'
          await onDone()
        } catch (err) {
          note.textContent = describeError(err)
        }
      },
    },
    h('label', { for: 'discount' }, 'Discount (%)'),
    rate,
    h('label', { for: 'discount-model' }, 'Model'),
    model,
    h('button', { type: 'submit' }, 'Save discount'),
    note,
  )
}

async function keysSection(ctx, id) {
  const box = h('section', { 'aria-labelledby': 'keys-title' })
  const created = h('div', { role: 'status', 'aria-live': 'polite' })
  const base = `/admin/accounts/${encodeURIComponent(id)}/keys`
  const name = h('input', { id: 'new-key-name', maxlength: '200', placeholder: 'optional' })
  const management = h('input', { id: 'new-key-management', type: 'checkbox' })
  const form = h(
    'form',
    {
      class: 'inline-form',
      'aria-label': 'Create a key',
      onsubmit: async (event) => {
        event.preventDefault()
        try {
          const body = {
            management: management.checked,
            ...(name.value.trim() ? { name: name.value.trim() } : {}),
          }
          const k = await api(base, { method: 'POST', body })
          created.replaceChildren(
            h(
              'div',
              { class: 'card secret' },
              h('p', {}, 'The new key, shown this once:'),
              h('code', { dataset: { testid: 'new-key' } }, k.key),
            ),
          )
          name.value = ''
          management.checked = false
          await load()
        } catch (err) {
          ctx.fail(err)
        }
      },
    },
    h('label', { for: 'new-key-name' }, 'Name'),
    name,
    h('label', { class: 'check' }, management, ' Management key'),
    h('button', { type: 'submit' }, 'Create a key'),
  )
  const load = async () => {
    const keys = (await api(base)).data
    box.replaceChildren(
      h('h2', { id: 'keys-title' }, 'Keys'),
      form,
      created,
      localPages(keys, 10, (items) =>
        table(
          'Keys',
          ['Key', 'Role', 'Usage', 'Limit', 'State', 'Created', ''],
          items.map((k) =>
            h(
              'tr',
              { dataset: { key: k.hash } },
              h(
                'td',
                {},
                h('strong', {}, k.name),
                h('div', { class: 'muted small' }, k.prefix ? `${k.prefix}…` : '(given as a hash)'),
              ),
              h('td', {}, k.is_management_key ? 'management' : 'inference'),
              h('td', { class: 'num' }, usd(k.usage)),
              h(
                'td',
                {},
                k.limit === null
                  ? 'No limit'
                  : `${usd(k.limit_remaining)} left of ${usd(k.limit)}${k.limit_reset ? ` (${k.limit_reset})` : ''}`,
              ),
              h(
                'td',
                {},
                k.disabled
                  ? 'disabled'
                  : k.expires_at && Date.parse(k.expires_at) <= Date.now()
                    ? 'expired'
                    : 'active',
              ),
              h('td', {}, when(k.created_at)),
              h(
                'td',
                {},
                h(
                  'button',
                  {
                    type: 'button',
                    class: 'danger',
                    onclick: async () => {
                      if (!window.confirm(`Revoke the key ${k.name}? Requests made with it stop at once.`))
                        return
                      await api(`${base}/${encodeURIComponent(k.id)}`, { method: 'DELETE' }).catch(ctx.fail)
                      await load().catch(ctx.fail)
                    },
                  },
                  'Revoke',
                ),
              ),
            ),
          ),
          { empty: 'No keys.' },
        ),
      ),
    )
  }
  await load()
  return box
}

export async function accountPage(ctx) {
  const id = ctx.params[0] ?? ''
  const a = await api(`/admin/accounts/${encodeURIComponent(id)}`)
  const refresh = () => ctx.rerender()
  return [
    h('p', {}, h('a', { href: '#/admin/accounts' }, '← Accounts')),
    h('h1', {}, a.name, ' ', h('span', { class: 'muted small' }, a.id)),
    h(
      'div',
      { class: 'stats' },
      stat('Balance', usd(a.credits.balance), 'balance'),
      stat('Held', usd(a.credits.reserved)),
      stat('Used', usd(a.credits.total_usage)),
      stat('Credits', usd(a.credits.total_credits)),
      stat('Discount', percent(a.discount_percent)),
      stat(
        'Requests / min',
        a.rate_limits.requests_per_minute === null ? 'no limit' : int(a.rate_limits.requests_per_minute),
      ),
    ),
    h('div', { class: 'forms' }, topUpForm(a.id, refresh), discountForm(a, refresh)),
    Object.keys(a.model_discounts).length
      ? table(
          'Model discounts',
          ['Model', 'Discount'],
          Object.entries(a.model_discounts).map(([m, r]) => [m, percent(r)]),
          { showCaption: true },
        )
      : '',
    await keysSection(ctx, a.id),
    await spendSection(ctx, `/admin/accounts/${encodeURIComponent(a.id)}/activity`),
    h('h2', {}, 'Generations'),
    await generationList(
      ctx,
      `/admin/accounts/${encodeURIComponent(a.id)}/generations`,
      (gid) => `#/admin/generation/${encodeURIComponent(a.id)}/${encodeURIComponent(gid)}`,
    ),
  ]
}

const priceText = (p) => {
  if (!p) return 'not priced'
  const parts = Object.entries(p)
    .filter(([k, v]) => !['currency', 'unit', 'units'].includes(k) && typeof v === 'number')
    .map(([k, v]) => `${k.replaceAll('_', ' ')} ${usd(v)}`)
  return `${parts.join(', ')}${p.unit ? ` ${p.unit.replaceAll('_', ' ')}` : ''}`
}

export async function deploymentsPage() {
  const models = (await api('/admin/deployments')).data
  const rows = models.flatMap((m) =>
    m.deployments.map((d) =>
      h(
        'tr',
        {},
        h('td', {}, m.model, h('div', { class: 'muted small' }, m.type)),
        h('td', {}, d.provider, h('div', { class: 'muted small' }, d.upstream_model)),
        h('td', {}, priceText(d.pricing)),
        h(
          'td',
          {},
          h('span', { class: `badge badge-${d.health.breaker}` }, d.health.breaker.replace('_', '-')),
        ),
        h('td', { class: 'num' }, d.health.latency_ms === null ? '—' : `${int(d.health.latency_ms)} ms`),
        h('td', { class: 'num' }, d.health.error_rate === null ? '—' : percent(d.health.error_rate)),
      ),
    ),
  )
  return [
    h('h1', {}, 'Models and deployments'),
    h('p', { class: 'muted' }, 'Breakers, latency and error rate as this gateway instance sees them.'),
    localPages(rows, 25, (items) =>
      table('Deployments', ['Model', 'Provider', 'Price', 'Breaker', 'First byte', 'Errors'], items, {
        empty: 'No models.',
      }),
    ),
  ]
}

export async function adminGenerationPage(ctx) {
  const [accountId, gid] = ctx.params
  const g = await api(`/admin/generations/${encodeURIComponent(gid)}`)
  return [
    h('p', {}, h('a', { href: accountLink(g.account_id ?? accountId) }, '← Account')),
    h('h1', {}, 'Generation'),
    generationDetail(g),
  ]
}

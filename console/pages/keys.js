import { api, describeError } from '../lib/api.js'
import { h, table, usd, when } from '../lib/dom.js'
import { status } from '../lib/ui.js'

// The account's keys (GET/POST /v1/keys, PATCH/DELETE /v1/keys/{hash}, OpenRouter's shapes): limits
// and usage for everyone, and create, edit, disable and delete for a management key.

const PAGE = 20
const RESETS = [
  ['', 'No reset'],
  ['daily', 'Daily (UTC)'],
  ['weekly', 'Weekly (UTC)'],
  ['monthly', 'Monthly (UTC)'],
]

const limitText = (k) =>
  k.limit === null || k.limit === undefined
    ? 'No limit'
    : `${usd(k.limit_remaining)} left of ${usd(k.limit)}${k.limit_reset ? ` (${k.limit_reset})` : ''}`

function keyForm({ key, onSubmit, submitLabel }) {
  const id = (n) => `${key ? `k-${key.hash.slice(0, 8)}` : 'new'}-${n}`
  const name = h('input', {
    id: id('name'),
    name: 'name',
    required: true,
    maxlength: '200',
    value: key?.name ?? '',
  })
  const limit = h('input', {
    id: id('limit'),
    name: 'limit',
    type: 'number',
    min: '0',
    step: '0.01',
    inputmode: 'decimal',
    value: key?.limit ?? '',
  })
  const reset = h(
    'select',
    { id: id('reset'), name: 'limit_reset' },
    RESETS.map(([v, label]) => h('option', { value: v, selected: (key?.limit_reset ?? '') === v }, label)),
  )
  const expires = h('input', {
    id: id('expires'),
    name: 'expires_at',
    type: 'date',
    value: key?.expires_at ? key.expires_at.slice(0, 10) : '',
  })
  const note = status()
  const form = h(
    'form',
    {
      class: 'form-grid',
      onsubmit: async (event) => {
        event.preventDefault()
        note.textContent = 'Saving…'
        try {
          await onSubmit({
            name: name.value.trim(),
            limit: limit.value === '' ? null : Number(limit.value),
            limit_reset: reset.value === '' ? null : reset.value,
            expires_at: expires.value === '' ? null : `${expires.value}T23:59:59Z`,
          })
          note.textContent = ''
        } catch (err) {
          note.textContent = describeError(err)
        }
      },
    },
    h('label', { for: id('name') }, 'Name'),
    name,
    h('label', { for: id('limit') }, 'Limit (USD)'),
    limit,
    h('label', { for: id('reset') }, 'Limit resets'),
    reset,
    h('label', { for: id('expires') }, 'Expires'),
    expires,
    h('button', { type: 'submit' }, submitLabel),
    note,
  )
  return form
}

export async function keysPage(ctx) {
  const box = h('div')
  const created = h('div', { role: 'status', 'aria-live': 'polite' })
  let offset = 0

  const load = async () => {
    let res
    try {
      res = await api(`/v1/keys?offset=${offset}&limit=${PAGE}&include_disabled=true`, { quiet: true })
    } catch (err) {
      if (err.status === 403) {
        const me = await api('/v1/key').catch(() => null)
        box.replaceChildren(
          h(
            'p',
            { class: 'notice-inline' },
            'Managing keys needs a management key: sign in with one to list, create, edit or delete keys.',
          ),
          me
            ? table(
                'This key',
                ['Key', 'Usage', 'Limit', 'Expires'],
                [[me.data.label, usd(me.data.usage), limitText(me.data), when(me.data.expires_at)]],
              )
            : '',
        )
        return
      }
      if (err.status === 404) {
        box.replaceChildren(
          h('p', { class: 'notice-inline' }, 'This gateway does not offer key management (GET /v1/keys).'),
        )
        return
      }
      throw err
    }
    const keys = res.data
    const rows = keys.map((k) => {
      const edit = h('tr', { class: 'edit-row', hidden: true }, h('td', { colspan: '7' }))
      const row = h(
        'tr',
        { dataset: { key: k.hash } },
        h(
          'td',
          {},
          h('strong', {}, k.name ?? '—'),
          h('div', { class: 'muted small' }, k.label ?? '', k.is_management_key ? ' · management' : ''),
        ),
        h(
          'td',
          { class: 'num' },
          usd(k.usage),
          h('div', { class: 'muted small' }, `today ${usd(k.usage_daily)} · month ${usd(k.usage_monthly)}`),
        ),
        h('td', {}, limitText(k)),
        h('td', {}, k.expires_at ? when(k.expires_at) : 'Never'),
        h(
          'td',
          {},
          k.disabled
            ? h('span', { class: 'badge badge-failed' }, 'disabled')
            : h('span', { class: 'badge badge-success' }, 'active'),
        ),
        h('td', {}, when(k.created_at)),
        h(
          'td',
          { class: 'actions' },
          h(
            'button',
            {
              type: 'button',
              onclick: () => {
                edit.hidden = !edit.hidden
                if (!edit.hidden) {
                  edit.firstChild.replaceChildren(
                    keyForm({
                      key: k,
                      submitLabel: 'Save',
                      onSubmit: async (body) => {
                        await api(`/v1/keys/${encodeURIComponent(k.hash)}`, { method: 'PATCH', body })
                        await load()
                      },
                    }),
                  )
                  edit.querySelector('input')?.focus()
                }
              },
            },
            'Edit',
          ),
          h(
            'button',
            {
              type: 'button',
              onclick: async () => {
                await api(`/v1/keys/${encodeURIComponent(k.hash)}`, {
                  method: 'PATCH',
                  body: { disabled: !k.disabled },
                }).catch(ctx.fail)
                await load().catch(ctx.fail)
              },
            },
            k.disabled ? 'Enable' : 'Disable',
          ),
          h(
            'button',
            {
              type: 'button',
              class: 'danger',
              onclick: async () => {
                if (
                  !window.confirm(`Delete the key ${k.name ?? k.label}? Requests made with it stop at once.`)
                )
                  return
                await api(`/v1/keys/${encodeURIComponent(k.hash)}`, { method: 'DELETE' }).catch(ctx.fail)
                await load().catch(ctx.fail)
              },
            },
            'Delete',
          ),
        ),
      )
      return [row, edit]
    })
    box.replaceChildren(
      h('h2', {}, 'New key'),
      keyForm({
        submitLabel: 'Create key',
        onSubmit: async (body) => {
          const made = await api('/v1/keys', { method: 'POST', body })
          created.replaceChildren(
            h(
              'div',
              { class: 'card secret' },
              h('p', {}, 'The new key, shown this once: copy it now.'),
              h('code', { dataset: { testid: 'new-key' } }, made.key),
            ),
          )
          await load()
        },
      }),
      created,
      h('h2', {}, 'Keys'),
      table('Keys', ['Name', 'Usage', 'Limit', 'Expires', 'State', 'Created', 'Actions'], rows.flat(), {
        empty: 'No keys.',
      }),
      h(
        'nav',
        { class: 'pager', 'aria-label': 'Pages' },
        h(
          'button',
          {
            type: 'button',
            disabled: offset === 0,
            onclick: () => ((offset = Math.max(0, offset - PAGE)), void load().catch(ctx.fail)),
          },
          '← Previous',
        ),
        h(
          'button',
          {
            type: 'button',
            disabled: keys.length < PAGE,
            onclick: () => ((offset += PAGE), void load().catch(ctx.fail)),
          },
          'Next →',
        ),
      ),
    )
  }
  await load()
  return [h('h1', {}, 'Keys'), box]
}

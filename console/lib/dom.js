// Building DOM nodes without HTML strings: text is always text, so nothing from the API can become
// markup.

/**
 * h('a', { href: '#/x', onclick }, 'text', child) — attributes starting with `on` are listeners,
 * `class` and `dataset` are set as such, `false`/`null`/`undefined` attributes are left out.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag)
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value)
    else if (name === 'dataset') Object.assign(el.dataset, value)
    else if (name === 'class') el.className = value
    else if (name in el && typeof value !== 'string') el[name] = value
    else el.setAttribute(name, value === true ? '' : String(value))
  }
  append(el, children)
  return el
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue
    el.append(c instanceof Node ? c : document.createTextNode(String(c)))
  }
}

/** Replaces the children of `el`. */
export function mount(el, ...children) {
  el.replaceChildren()
  append(el, children)
  return el
}

const usdFormat = new Intl.NumberFormat('en-US', {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 2,
  maximumFractionDigits: 6,
})

/**
 * Dollars: cents always, up to six decimals for the small amounts a request costs, and below a
 * millionth the digits that are not zero (an embedding can cost $0.0000002).
 */
export function usd(n) {
  if (typeof n !== 'number') return '—'
  if (n !== 0 && Math.abs(n) < 0.000001)
    return `${n < 0 ? '-' : ''}$${Math.abs(n).toFixed(12).replace(/0+$/, '')}`
  return usdFormat.format(n)
}

const intFormat = new Intl.NumberFormat('en-US')
export const int = (n) => (typeof n === 'number' ? intFormat.format(n) : '—')

/** A time as the reader's local date and time; input is ISO text or Unix seconds. */
export function when(t) {
  if (t === null || t === undefined) return '—'
  const d = typeof t === 'number' ? new Date(t * 1000) : new Date(t)
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleString()
}

export const percent = (rate) => (typeof rate === 'number' ? `${Math.round(rate * 1000) / 10} %` : '—')

/** A table whose rows come from `rows` (each a list of cells), in a scrolling box for narrow screens. */
export function table(caption, headers, rows, options = {}) {
  return h(
    'div',
    { class: 'table-box', tabindex: '0', role: 'region', 'aria-label': caption },
    h(
      'table',
      { class: options.class },
      h('caption', { class: options.showCaption ? '' : 'sr-only' }, caption),
      h(
        'thead',
        {},
        h(
          'tr',
          {},
          headers.map((x) => h('th', { scope: 'col' }, x)),
        ),
      ),
      h(
        'tbody',
        {},
        rows.length === 0
          ? h(
              'tr',
              {},
              h('td', { colspan: String(headers.length), class: 'muted' }, options.empty ?? 'Nothing yet.'),
            )
          : rows.map((r) =>
              r instanceof Node
                ? r
                : h(
                    'tr',
                    {},
                    r.map((c) => h('td', {}, c)),
                  ),
            ),
      ),
    ),
  )
}

/** A labelled statistic. */
export const stat = (label, value, testid) =>
  h(
    'div',
    { class: 'stat' },
    h('div', { class: 'stat-label' }, label),
    h('div', { class: 'stat-value', dataset: testid ? { testid } : undefined }, value),
  )

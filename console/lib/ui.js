import { h } from './dom.js'

/** Older/newer buttons of a cursor-paged list. */
export function pager({ page, hasOlder, onOlder, onNewer, label = 'Pages' }) {
  return h(
    'nav',
    { class: 'pager', 'aria-label': label },
    h('button', { type: 'button', disabled: page <= 1, onclick: onNewer }, '← Newer'),
    h('span', { class: 'muted' }, `Page ${page}`),
    h('button', { type: 'button', disabled: !hasOlder, onclick: onOlder }, 'Older →'),
  )
}

/** Pages through a list held whole (the API answers it in one piece). */
export function localPages(items, size, render) {
  let page = 0
  const box = h('div')
  const draw = () => {
    const pages = Math.max(1, Math.ceil(items.length / size))
    page = Math.min(page, pages - 1)
    box.replaceChildren(
      render(items.slice(page * size, page * size + size)),
      h(
        'nav',
        { class: 'pager', 'aria-label': 'Pages' },
        h(
          'button',
          { type: 'button', disabled: page === 0, onclick: () => ((page -= 1), draw()) },
          '← Previous',
        ),
        h('span', { class: 'muted' }, `Page ${page + 1} of ${pages}`),
        h(
          'button',
          { type: 'button', disabled: page >= pages - 1, onclick: () => ((page += 1), draw()) },
          'Next →',
        ),
      ),
    )
  }
  draw()
  return box
}

/** A status line for a form: polite announcements for screen readers. */
export const status = () => h('p', { class: 'form-status', role: 'status', 'aria-live': 'polite' })

/** Buttons choosing 7, 30 or 90 days. */
export function periodPicker(current, onPick) {
  return h(
    'div',
    { class: 'segmented', role: 'group', 'aria-label': 'Period' },
    [7, 30, 90].map((d) =>
      h(
        'button',
        { type: 'button', 'aria-pressed': String(d === current), onclick: () => onPick(d) },
        `${d} days`,
      ),
    ),
  )
}

export function mediaPreview(item) {
  if (item.type === 'image')
    return h('img', { src: item.image, alt: 'Image output', class: 'preview', loading: 'lazy' })
  if (item.type === 'video')
    return h('video', { src: item.video, controls: true, preload: 'metadata', class: 'preview' })
  const audio = h('audio', { src: item.audio, controls: true, preload: 'metadata', class: 'preview-audio' })
  audio.addEventListener('playing', () => {
    audio.dataset.played = 'true'
  })
  return audio
}

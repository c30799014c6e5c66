import { api, describeError } from '../lib/api.js'
import { h } from '../lib/dom.js'

/** The sign-in form. `onSignedIn(session)` runs after a key was accepted. */
export function signInPage({ message, onSignedIn }) {
  const input = h('input', {
    id: 'key',
    name: 'key',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    required: true,
    maxlength: '512',
  })
  const error = h(
    'p',
    { class: 'error', role: 'alert', id: 'sign-in-error', hidden: !message },
    message ?? '',
  )
  const button = h('button', { type: 'submit' }, 'Sign in')
  const form = h(
    'form',
    {
      class: 'card sign-in',
      'aria-labelledby': 'sign-in-title',
      onsubmit: async (event) => {
        event.preventDefault()
        button.disabled = true
        error.hidden = true
        try {
          const session = await api('/console/session', {
            method: 'POST',
            body: { key: input.value },
            quiet: true,
          })
          input.value = ''
          onSignedIn(session)
        } catch (err) {
          error.textContent =
            err.status === 401 ? 'That key was not accepted. Check it and try again.' : describeError(err)
          error.hidden = false
          input.focus()
        } finally {
          button.disabled = false
        }
      },
    },
    h('h1', { id: 'sign-in-title' }, 'Sign in'),
    h(
      'p',
      { class: 'muted' },
      'Use one of your account’s API keys, or the operator’s admin key. The key is exchanged for a short session; it is not stored in the browser.',
    ),
    h('label', { for: 'key' }, 'Key'),
    input,
    error,
    button,
  )
  queueMicrotask(() => input.focus())
  return form
}

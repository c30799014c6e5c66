import { api, ApiError, describeError, onUnauthorized, setCsrf } from './lib/api.js'
import { h, mount } from './lib/dom.js'
import {
  filesPage,
  generationPage,
  generationsPage,
  overviewPage,
  predictionsPage,
  webhooksPage,
} from './pages/account.js'
import { accountPage, accountsPage, adminGenerationPage, deploymentsPage } from './pages/admin.js'
import { keysPage } from './pages/keys.js'
import { signInPage } from './pages/sign-in.js'

// The console's shell: who is signed in, the navigation for that role, and a hash router
// (#/overview, #/generation/<id>, …) that renders one page at a time into <main>.

const main = document.getElementById('main')
const nav = document.getElementById('nav')
const who = document.getElementById('who')
const notice = document.getElementById('notice')

const ACCOUNT_PAGES = {
  overview: { title: 'Overview', render: overviewPage },
  generations: { title: 'Generations', render: generationsPage },
  generation: { title: 'Generation', render: generationPage, hidden: true },
  keys: { title: 'Keys', render: keysPage },
  files: { title: 'Files', render: filesPage },
  predictions: { title: 'Predictions', render: predictionsPage },
  webhooks: { title: 'Webhooks', render: webhooksPage },
}
const ADMIN_PAGES = {
  'admin/accounts': { title: 'Accounts', render: accountsPage },
  'admin/account': { title: 'Account', render: accountPage, hidden: true },
  'admin/generation': { title: 'Generation', render: adminGenerationPage, hidden: true },
  'admin/deployments': { title: 'Models', render: deploymentsPage },
}

let session = null
let leaving = []
let renderCount = 0

const pagesOf = (s) => (s?.role === 'admin' ? ADMIN_PAGES : ACCOUNT_PAGES)
const homeOf = (s) => (s?.role === 'admin' ? 'admin/accounts' : 'overview')

function showNotice(text) {
  notice.textContent = text ?? ''
  notice.hidden = !text
}

/** `#/admin/account/acme` → the page key and its parameters. */
function parseRoute(pages) {
  const path = decodeURIComponent(location.hash.replace(/^#\/?/, '').split('?')[0] ?? '')
  const parts = path.split('/').filter(Boolean)
  for (let n = parts.length; n > 0; n--) {
    const key = parts.slice(0, n).join('/')
    if (pages[key]) return { key, params: parts.slice(n) }
  }
  return null
}

function drawChrome() {
  const pages = pagesOf(session)
  const current = parseRoute(pages)?.key
  mount(
    nav,
    session
      ? h(
          'ul',
          {},
          Object.entries(pages)
            .filter(([, p]) => !p.hidden)
            .map(([key, p]) =>
              h(
                'li',
                {},
                h('a', { href: `#/${key}`, 'aria-current': key === current ? 'page' : false }, p.title),
              ),
            ),
        )
      : '',
  )
  mount(
    who,
    session
      ? [
          h('span', { class: 'muted' }, session.role === 'admin' ? 'Operator' : session.account.name),
          h(
            'button',
            { type: 'button', class: 'link', id: 'sign-out', onclick: () => void signOut() },
            'Sign out',
          ),
        ]
      : '',
  )
}

function showSignIn(message) {
  session = null
  setCsrf('')
  for (const fn of leaving) fn()
  leaving = []
  // A page still loading for the session that ended must not draw over the form when its answer comes.
  renderCount += 1
  main.removeAttribute('aria-busy')
  main.dataset.page = 'sign-in'
  drawChrome()
  document.title = 'Sign in · Junction console'
  mount(
    main,
    signInPage({
      message,
      onSignedIn: (s) => {
        session = s
        setCsrf(s.csrf_token)
        showNotice('')
        const target = parseRoute(pagesOf(s)) ? location.hash : `#/${homeOf(s)}`
        if (location.hash === target) void render()
        else location.hash = target
      },
    }),
  )
}

async function signOut() {
  try {
    await api('/console/session', { method: 'DELETE', quiet: true })
  } catch (err) {
    showNotice(describeError(err))
    return
  }
  history.replaceState(null, '', location.pathname)
  showSignIn('You are signed out.')
}

async function render() {
  if (!session) return showSignIn()
  const pages = pagesOf(session)
  const route = parseRoute(pages)
  if (!route) {
    location.hash = `#/${homeOf(session)}`
    return
  }
  for (const fn of leaving) fn()
  leaving = []
  const mine = ++renderCount
  drawChrome()
  const page = pages[route.key]
  document.title = `${page.title} · Junction console`
  main.setAttribute('aria-busy', 'true')
  const ctx = {
    params: route.params,
    onLeave: (fn) => leaving.push(fn),
    rerender: () => render(),
    fail: (err) => showNotice(describeError(err)),
  }
  try {
    const content = await page.render(ctx)
    if (mine !== renderCount) return
    showNotice('')
    mount(main, content)
  } catch (err) {
    if (mine !== renderCount) return
    if (err instanceof ApiError && err.status === 401) return
    mount(main, h('h1', {}, page.title), h('p', { class: 'error', role: 'alert' }, describeError(err)))
  } finally {
    if (mine === renderCount) {
      main.removeAttribute('aria-busy')
      main.dataset.page = route.key
    }
  }
}

// The skip link moves focus to the page's content; its #main must not reach the router.
document.querySelector('.skip')?.addEventListener('click', (event) => {
  event.preventDefault()
  main.focus()
})

onUnauthorized((err) => {
  if (!session) return
  showSignIn(describeError(err))
})
window.addEventListener('hashchange', () => void render())
// The chart takes its colours when drawn: a switch between light and dark draws the page again.
window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => void render())

async function start() {
  try {
    const s = await api('/console/session', { quiet: true })
    session = s
    setCsrf(s.csrf_token)
    await render()
  } catch (err) {
    showSignIn(err instanceof ApiError && err.code === 'session_expired' ? describeError(err) : undefined)
  }
}

void start()

import { createHash } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { DESKTOP, DOC_SHOTS, docsScreenshotDir, launchChromium, PHONE, screenshotDir } from './chromium.ts'

// The console in headless Chromium against a real gateway on 127.0.0.1: an account signs in, reads its
// balance, spend chart, generations and predictions (an audio output plays), and signs out; the
// operator tops an account up. Another account's data never shows; a wrong key, an expired session
// and a forged CSRF token are refused. Each page is also photographed at desktop and phone width.

const ADMIN = 'admin-key-0123456789abcdef'
const ACME = 'sk-acme-console-0123456789'
const OTHER = 'sk-other-console-0123456789'
const OTHER_SECRET_WORDS = 'zebra-ferret-confidential'

const clock = { skew: 0 }
let gw: TestGateway
let browser: Browser
let context: BrowserContext
let page: Page
let otherGeneration = ''
let MANAGEMENT = ''
const shots = screenshotDir()
const docsShots = docsScreenshotDir()

/** What the test reads of an <audio> element in the page (the test's types have no DOM). */
interface AudioLike {
  duration: number
  error: { code: number } | null
  addEventListener(event: string, listener: () => void, options: { once: boolean }): void
  play(): Promise<void>
  pause(): void
}

/** The console's way of writing dollars (console/lib/dom.js). */
const money = (n: number): string =>
  n !== 0 && Math.abs(n) < 0.000001
    ? `$${n.toFixed(12).replace(/0+$/, '')}`
    : new Intl.NumberFormat('en-US', {
        style: 'currency',
        currency: 'USD',
        minimumFractionDigits: 2,
        maximumFractionDigits: 6,
      }).format(n)

const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })
async function call(
  path: string,
  key: string,
  init: { method?: string; body?: unknown } = {},
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${gw.origin}${path}`, {
    method: init.method ?? 'GET',
    headers: bearer(key),
    body: init.body === undefined ? undefined : JSON.stringify(init.body),
  })
  return { status: res.status, body: await res.json() }
}

/** Every generation record of the account, through the API (paged). */
async function allRecords(key: string) {
  const out: { generationId: string; usage: { cost: number } }[] = []
  let before = ''
  for (;;) {
    const page = await call(`/v1/generations?limit=100${before ? `&before=${before}` : ''}`, key)
    out.push(...page.body.data)
    if (!page.body.next_cursor) return out
    before = page.body.next_cursor
  }
}

/** Resolves after the page's next two animation frames: what it was drawing is drawn. */
function twoFrames(): Promise<unknown> {
  return page.evaluate(
    () =>
      new Promise((resolve) => {
        const raf = (globalThis as unknown as { requestAnimationFrame(f: () => void): void })
          .requestAnimationFrame
        raf(() => raf(() => resolve(null)))
      }),
  )
}

/** Photographs the page at desktop and phone width (and keeps the documentation's in docs/images). */
async function shoot(name: string) {
  for (const [width, viewport] of [
    ['desktop', DESKTOP],
    ['phone', PHONE],
  ] as const) {
    await page.setViewportSize(viewport)
    // The chart follows its box's new width on the next frames.
    await twoFrames()
    const file = `console-${name}-${width}.png`
    const png = await page.screenshot({ path: join(shots, file), fullPage: true })
    if (docsShots && DOC_SHOTS.has(file)) writeFileSync(join(docsShots, file), png)
  }
  await page.setViewportSize(DESKTOP)
}

/** Goes to a page of the console and waits until it has rendered. */
async function open(hash: string, pageKey: string) {
  await page.evaluate((h) => {
    ;(globalThis as unknown as { location: { hash: string } }).location.hash = h
  }, hash)
  await page.locator(`main[data-page="${pageKey}"]:not([aria-busy])`).waitFor()
}

async function signIn(key: string) {
  await page.fill('#key', key)
  // The keyboard submits the form.
  await page.press('#key', 'Enter')
}

beforeAll(async () => {
  gw = await startGateway({
    env: { GATEWAY_ADMIN_KEY: ADMIN, MOCK_TASK_DELAY_MS: '0' },
    file: {
      accounts: [
        { id: 'acme', name: 'Acme Corp', credits: 50, keys: [ACME] },
        { id: 'other', name: 'Other Ltd', credits: 50, keys: [OTHER] },
      ],
    },
    listen: true,
    overrides: { now: () => Date.now() + clock.skew, background: false },
  })
  // Acme's records: chat and embeddings; Other's: one chat whose words must never show for Acme.
  for (const content of ['hello', 'what is a gateway', 'tell me a story']) {
    await call('/v1/chat/completions', ACME, {
      method: 'POST',
      body: { model: 'mock/chat', messages: [{ role: 'user', content }] },
    })
  }
  await call('/v1/embeddings', ACME, { method: 'POST', body: { model: 'mock/embed', input: ['one', 'two'] } })
  const other = await call('/v1/chat/completions', OTHER, {
    method: 'POST',
    body: { model: 'mock/chat', messages: [{ role: 'user', content: OTHER_SECRET_WORDS }] },
  })
  otherGeneration = other.body.id
  // Acme's management key, made by the operator.
  MANAGEMENT = (
    await call('/admin/accounts/acme/keys', ADMIN, {
      method: 'POST',
      body: { management: true, name: 'console admin' },
    })
  ).body.key
  // A speech prediction, driven to its end by the runner.
  const task = await call('/v1/predictions', ACME, {
    method: 'POST',
    body: {
      model: 'mock/speech',
      input: { prompt: 'Hello from the console', voice: 'Puck', output_format: 'wav' },
    },
  })
  const id = task.body.data.task_id
  // Each step moves the clock past the poll wait (the test clock is put back after).
  for (let i = 0; i < 10; i++) {
    clock.skew += 60_000
    await gw.deps.runner.runOnce()
    if ((await call(`/v1/predictions/${id}`, ACME)).body.data.task_status !== 'processing') break
  }
  clock.skew = 0
  expect((await call(`/v1/predictions/${id}`, ACME)).body.data.task_status).toBe('success')
  browser = await launchChromium()
  context = await browser.newContext({ viewport: DESKTOP })
  page = await context.newPage()
  page.on('pageerror', (err) => {
    throw err
  })
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await gw?.close()
})

describe('the console in Chromium', () => {
  it('refuses a wrong key with one message and no session', async () => {
    await page.goto(`${gw.origin}/console`)
    await page.locator('#key').waitFor()
    await shoot('sign-in')
    await signIn('sk-not-a-key')
    await expect
      .poll(() => page.locator('#sign-in-error').textContent())
      .toBe('That key was not accepted. Check it and try again.')
    expect(await context.cookies()).toEqual([])
  })

  it('signs an account in: its balance, and a spend chart whose total is the sum of its records', async () => {
    await signIn(ACME)
    await page.locator('main[data-page="overview"]:not([aria-busy]) [data-testid="balance"]').waitFor()
    const cookies = await context.cookies()
    expect(cookies).toHaveLength(1)
    expect(cookies[0]).toMatchObject({ name: 'junction_console', httpOnly: true, sameSite: 'Strict' })

    const account = (await call('/v1/account', ACME)).body
    expect(await page.locator('[data-testid="balance"]').textContent()).toBe(money(account.credits.balance))

    const records = await allRecords(ACME)
    expect(records.length).toBe(5) // three chats, one embedding, one speech task
    const sum = records.reduce((acc, r) => acc + r.usage.cost, 0)
    expect(sum).toBeGreaterThan(0)
    const drawn = Number(await page.locator('figure.chart-figure').getAttribute('data-drawn-total'))
    expect(drawn).toBeCloseTo(sum, 12)
    expect(await page.locator('[data-testid="chart-total"]').textContent()).toBe(money(sum))
    // The chart is drawn: uPlot's canvas with one series per model in its legend.
    expect(await page.locator('.chart canvas').count()).toBe(1)
    const legend = await page.locator('.chart .u-legend').textContent()
    for (const model of ['mock/chat', 'mock/embed', 'mock/speech']) expect(legend).toContain(model)
    await shoot('overview')

    await page.click('button[aria-pressed="false"]:text("7 days")')
    await expect.poll(() => page.locator('button[aria-pressed="true"]').textContent()).toBe('7 days')
    expect(await page.locator('[data-testid="chart-total"]').textContent()).toBe(money(sum))
  })

  it('works from the keyboard and in dark mode', async () => {
    // The first Tab reaches the skip link, which moves focus to the page's content.
    await page.reload()
    await page.locator('main[data-page="overview"]:not([aria-busy])').waitFor()
    await page.keyboard.press('Tab')
    expect(
      await page.evaluate(
        () =>
          (globalThis as unknown as { document: { activeElement: { className: string } } }).document
            .activeElement.className,
      ),
    ).toBe('skip')
    await page.keyboard.press('Enter')
    expect(
      await page.evaluate(
        () =>
          (globalThis as unknown as { document: { activeElement: { id: string } } }).document.activeElement
            .id,
      ),
    ).toBe('main')
    expect(page.url()).toMatch(/#\/overview$/)
    // Then the navigation, link by link.
    await page.locator('.skip').focus()
    await page.keyboard.press('Tab')
    await page.keyboard.press('Tab')
    await page.keyboard.press('Enter')
    await page.locator('main[data-page="generations"]:not([aria-busy])').waitFor()
    await open('#/overview', 'overview')

    const background = () =>
      page.evaluate(() => {
        const g = globalThis as unknown as {
          document: { body: object }
          getComputedStyle(e: object): { backgroundColor: string }
        }
        return g.getComputedStyle(g.document.body).backgroundColor
      })
    expect(await background()).toBe('rgb(247, 247, 248)')
    await page.emulateMedia({ colorScheme: 'dark' })
    expect(await background()).toBe('rgb(17, 19, 24)')
    await open('#/generations', 'generations')
    await open('#/overview', 'overview')
    await shoot('overview-dark')
    await page.emulateMedia({ colorScheme: 'light' })
  })

  it('lists generations with a model filter and opens one', async () => {
    await open('#/generations', 'generations')
    expect(await page.locator('tbody tr[data-generation]').count()).toBe(5)
    await shoot('generations')
    await page.selectOption('#model-filter', 'mock/embed')
    await expect.poll(() => page.locator('tbody tr[data-generation]').count()).toBe(1)
    const id = await page.locator('tbody tr[data-generation]').getAttribute('data-generation')
    expect(id).toBeTruthy()
    await page.click(`tr[data-generation="${id}"] a`)
    await page.locator('main[data-page="generation"]:not([aria-busy]) dl.details').waitFor()
    const record = (await call(`/v1/generation?id=${id}`, ACME)).body
    expect(record.model).toBe('mock/embed')
    expect(await page.locator('dl.details').textContent()).toContain(id)
    expect(await page.locator('[data-testid="generation-cost"]').textContent()).toBe(money(record.usage.cost))
    await shoot('generation')
  })

  it('plays a speech output inline through its signed URL', async () => {
    await open('#/predictions', 'predictions')
    const audio = page.locator('audio').first()
    expect(await audio.getAttribute('src')).toMatch(/\/v1\/outputs\/[^?]+\?expires=\d+&signature=/)
    const played = await audio.evaluate(
      (a: AudioLike) =>
        new Promise<{ duration: number }>((resolve, reject) => {
          a.addEventListener('playing', () => resolve({ duration: a.duration }), { once: true })
          a.addEventListener('error', () => reject(new Error(`media error ${a.error?.code}`)), { once: true })
          a.play().catch(reject)
        }),
    )
    expect(played.duration).toBeGreaterThan(0)
    expect(await audio.getAttribute('data-played')).toBe('true')
    await audio.evaluate((a: AudioLike) => a.pause())
    await shoot('predictions')
  })

  it('tells an inference key that managing keys needs a management key, and shows its own limit', async () => {
    await open('#/keys', 'keys')
    expect(await page.locator('main .notice-inline').textContent()).toContain('needs a management key')
    expect(await page.locator('main table').textContent()).toContain('No limit')
  })

  it('shows the webhook secret on request', async () => {
    await open('#/webhooks', 'webhooks')
    expect(await page.locator('[data-testid="webhook-secret"]').count()).toBe(0)
    await page.click('button:text("Show the signing secret")')
    const secret = (await call('/v1/webhooks/secret', ACME)).body.secret
    await expect.poll(() => page.locator('[data-testid="webhook-secret"]').textContent()).toBe(secret)
    await shoot('webhooks')
  })

  it('never shows another account’s data', async () => {
    for (const [hash, key] of [
      ['#/overview', 'overview'],
      ['#/generations', 'generations'],
      ['#/predictions', 'predictions'],
      ['#/files', 'files'],
    ]) {
      await open(hash!, key!)
      const text = await page.locator('body').textContent()
      expect(text).not.toContain('Other Ltd')
      expect(text).not.toContain(otherGeneration)
      expect(text).not.toContain(OTHER_SECRET_WORDS)
    }
    await open(`#/generation/${otherGeneration}`, 'generation')
    expect(await page.locator('main .error').textContent()).toMatch(/^Not found: generation .* not found$/)
    // The page's own credential cannot reach it either.
    const status = await page.evaluate(
      async (id) => (await fetch(`/v1/generation?id=${id}`)).status,
      otherGeneration,
    )
    expect(status).toBe(404)
  })

  it('refuses a state-changing call with a forged CSRF token', async () => {
    const answer = await page.evaluate(async () => {
      const res = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': 'forged' },
        body: JSON.stringify({ model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] }),
      })
      return { status: res.status, body: await res.json() }
    })
    expect(answer).toMatchObject({ status: 403, body: { error: { code: 'invalid_csrf_token' } } })
    expect((await allRecords(ACME)).length).toBe(5)
  })

  it('sends an expired session back to the sign-in form', async () => {
    clock.skew = 2 * 3_600_000
    try {
      await page.click('nav a:text("Generations")')
      await expect
        .poll(() => page.locator('#sign-in-error').textContent())
        .toBe('Your session has expired. Sign in again.')
    } finally {
      clock.skew = 0
    }
  })

  it('signs out: the form comes back and the old cookie is refused', async () => {
    await signIn(ACME)
    await page.locator('main[data-page="generations"]:not([aria-busy])').waitFor()
    const cookie = (await context.cookies())[0]!
    await page.click('#sign-out')
    await expect.poll(() => page.locator('#sign-in-error').textContent()).toBe('You are signed out.')
    expect(await context.cookies()).toEqual([])
    const res = await fetch(`${gw.origin}/v1/account`, {
      headers: { cookie: `${cookie.name}=${cookie.value}` },
    })
    expect(res.status).toBe(401)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_session')
  })

  it('keeps the sign-in form when a page still loading at sign-out gets its answer', async () => {
    await signIn(ACME)
    await page.locator('main[data-page="overview"]:not([aria-busy])').waitFor()
    // The generations list is answered while the session is still good, and handed to the page only
    // after the sign-out.
    let requested!: () => void
    const inFlight = new Promise<void>((resolve) => (requested = resolve))
    let release!: () => void
    const held = new Promise<void>((resolve) => (release = resolve))
    let delivered!: () => void
    const handedOver = new Promise<void>((resolve) => (delivered = resolve))
    await page.route('**/v1/generations?*', async (route) => {
      const response = await route.fetch()
      requested()
      await held
      await route.fulfill({ response })
      delivered()
    })
    try {
      await page.evaluate(() => {
        ;(globalThis as unknown as { location: { hash: string } }).location.hash = '#/generations'
      })
      await inFlight
      await page.click('#sign-out')
      await expect.poll(() => page.locator('#sign-in-error').textContent()).toBe('You are signed out.')
      release()
      await handedOver
      await page.waitForLoadState('networkidle')
      // The page has had its turn to draw what it received.
      await twoFrames()
      expect(await page.locator('main table').count()).toBe(0)
      expect(await page.locator('#sign-in-error').count()).toBe(1)
      expect(await page.locator('main').getAttribute('data-page')).toBe('sign-in')
    } finally {
      release()
      await page.unroute('**/v1/generations?*')
      // Should it fail, the next tests still find the sign-in form.
      if ((await page.locator('#key').count()) === 0) await page.reload()
    }
  })

  it('lets a management key create, edit, disable and delete a key', async () => {
    await signIn(MANAGEMENT)
    await page.locator('main[data-page="overview"]:not([aria-busy])').waitFor()
    await open('#/keys', 'keys')
    await page.fill('#new-name', 'ci bot')
    await page.fill('#new-limit', '1')
    await page.selectOption('#new-reset', 'daily')
    await page.click('form:has(#new-name) button[type="submit"]')
    const made = (await page.locator('[data-testid="new-key"]').textContent())!
    expect((await call('/v1/key', made)).body.data).toMatchObject({
      label: expect.any(String),
      limit: 1,
      limit_reset: 'daily',
    })
    const hash = createHash('sha256').update(made).digest('hex')
    const row = page.locator(`tr[data-key="${hash}"]`)
    expect(await row.textContent()).toContain('ci bot')
    await shoot('keys')

    await row.locator('button:text("Edit")').click()
    const edit = page.locator(`#k-${hash.slice(0, 8)}-limit`)
    await edit.fill('2')
    await edit.press('Enter')
    await expect.poll(async () => (await call('/v1/key', made)).body.data.limit).toBe(2)

    await page.locator(`tr[data-key="${hash}"] button:text("Disable")`).click()
    await expect.poll(async () => (await call('/v1/key', made)).body.error?.code).toBe('key_disabled')
    await page.locator(`tr[data-key="${hash}"] button:text("Enable")`).waitFor()

    page.once('dialog', (d) => void d.accept())
    await page.locator(`tr[data-key="${hash}"] button:text("Delete")`).click()
    await expect.poll(() => page.locator(`tr[data-key="${hash}"]`).count()).toBe(0)
    expect((await call('/v1/key', made)).body.error.code).toBe('invalid_api_key')
    await page.click('#sign-out')
    await expect.poll(() => page.locator('#sign-in-error').textContent()).toBe('You are signed out.')
  })

  it('signs the operator in: accounts, a top-up, a key made and revoked, and the deployments', async () => {
    await signIn(ADMIN)
    await page.locator('main[data-page="admin/accounts"]:not([aria-busy])').waitFor()
    expect(await page.locator('tr[data-account]').count()).toBe(2)
    await shoot('admin-accounts')
    const before = (await call('/v1/account', ACME)).body.credits.balance
    await page.click('tr[data-account="acme"] a')
    await page.locator('main[data-page="admin/account"]:not([aria-busy]) #top-up').waitFor()
    await page.fill('#top-up', '5')
    await page.press('#top-up', 'Enter')
    await page.locator('main[data-page="admin/account"]:not([aria-busy]) [data-testid="balance"]').waitFor()
    await expect
      .poll(async () => (await call('/v1/account', ACME)).body.credits.balance)
      .toBeCloseTo(before + 5, 9)
    await expect.poll(() => page.locator('[data-testid="balance"]').textContent()).toBe(money(before + 5))

    const keysBefore = (await call('/admin/accounts/acme/keys', ADMIN)).body.data.length
    await page.click('button:text("Create a key")')
    const made = await page.locator('[data-testid="new-key"]').textContent()
    expect(made).toMatch(/^sk-jn-/)
    expect((await call('/v1/account', made!)).status).toBe(200)
    await shoot('admin-account')
    page.once('dialog', (d) => void d.accept())
    const prefix = made!.slice(0, 10)
    await page.click(`tr:has-text("${prefix}") button:text("Revoke")`)
    await expect
      .poll(async () => (await call('/admin/accounts/acme/keys', ADMIN)).body.data.length)
      .toBe(keysBefore)
    expect((await call('/v1/account', made!)).status).toBe(401)

    // One of the account's generations, opened from its list.
    const first = page.locator('tbody tr[data-generation]').first()
    const gid = (await first.getAttribute('data-generation'))!
    await first.locator('a').click()
    await page.locator('main[data-page="admin/generation"]:not([aria-busy]) dl.details').waitFor()
    expect(await page.locator('dl.details').textContent()).toContain(gid)

    await open('#/admin/deployments', 'admin/deployments')
    expect(await page.locator('main').textContent()).toContain('mock/chat')
    await shoot('admin-deployments')
  })
})

import { existsSync } from 'node:fs'
import { chromium, type Page } from 'playwright-core'
import { buildApp } from '../src/app.ts'
import { loadConfig } from '../src/config.ts'
import { createDeps } from '../src/deps.ts'
import { createLogger } from '../src/logger.ts'

// `npm run bench:console`: how long the console takes to show an account's overview (balance, spend
// chart of 30 days) in headless Chromium (Debian's), from navigation start to the chart drawn, with a
// cold cache (first visit) and a warm one (assets cached as immutable). The gateway runs in this
// process on 127.0.0.1 (memory store, development account, mock provider) with `RECORDS` generations
// spread over 30 days. Each case runs RUNS times; the table shows the median and the worst.
// It records figures and asserts nothing.

const RUNS = Number(process.env['BENCH_CONSOLE_RUNS'] ?? 10)
const RECORDS = Number(process.env['BENCH_CONSOLE_RECORDS'] ?? 2000)
const CHROMIUM = process.env['CHROMIUM_PATH'] ?? '/usr/bin/chromium'
const DAY = 86_400_000

if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}`)

let skew = 0
const config = loadConfig({ NODE_ENV: 'test', GATEWAY_DATABASE_URL: 'memory' })
const deps = await createDeps(config, { log: createLogger('silent'), now: () => Date.now() + skew })
const app = await buildApp(deps)
await app.listen({ host: '127.0.0.1', port: 0 })
const origin = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`

const models = ['mock/chat', 'mock/embed']
for (let i = 0; i < RECORDS; i++) {
  skew = -Math.floor((i / RECORDS) * 30) * DAY
  const model = models[i % 2]!
  await app.inject({
    method: 'POST',
    url: model === 'mock/chat' ? '/v1/chat/completions' : '/v1/embeddings',
    headers: { authorization: 'Bearer sk-dev' },
    payload:
      model === 'mock/chat'
        ? { model, messages: [{ role: 'user', content: `hello ${i}` }] }
        : { model, input: [`text ${i}`] },
  })
}
skew = 0

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
})

/** ms from navigation start to the overview's chart drawn; `reload` loads the same page again. */
async function visit(page: Page, reload = false): Promise<number> {
  if (reload) await page.reload()
  else await page.goto(`${origin}/console#/overview`)
  await page.locator('main[data-page="overview"]:not([aria-busy]) .chart canvas').waitFor()
  const t = await page.evaluate(() => {
    const perf = (
      globalThis as unknown as {
        performance: {
          now(): number
          getEntriesByType(
            t: string,
          ): { name: string; responseEnd: number; domContentLoadedEventEnd?: number; startTime: number }[]
        }
      }
    ).performance
    const nav = perf.getEntriesByType('navigation')[0]
    const res = perf
      .getEntriesByType('resource')
      .map((r) => `${r.name.split('/').slice(-1)[0]}:${Math.round(r.startTime)}-${Math.round(r.responseEnd)}`)
    return { now: perf.now(), dcl: nav?.domContentLoadedEventEnd, html: nav?.responseEnd, res }
  })
  if (process.env['BENCH_CONSOLE_DEBUG']) console.log(JSON.stringify(t))
  return t.now
}

const cold: number[] = []
const warm: number[] = []
for (let i = 0; i < RUNS; i++) {
  // A new context per run: signed in through the API (the cookie is shared with its pages), so the
  // first visit has nothing cached.
  const context = await browser.newContext()
  await context.request.post(`${origin}/console/session`, { data: { key: 'sk-dev' } })
  const page = await context.newPage()
  cold.push(await visit(page))
  warm.push(await visit(page, true))
  await context.close()
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const row = (name: string, xs: number[]) =>
  `| ${name.padEnd(34)} | ${median(xs).toFixed(0).padStart(9)} | ${Math.max(...xs)
    .toFixed(0)
    .padStart(8)} |`
console.log(`console overview, ${RECORDS} generations over 30 days, ${RUNS} runs each`)
console.log('| case                               | median ms |  worst ms |')
console.log('| ---------------------------------- | --------- | --------- |')
console.log(row('first visit (assets not cached)', cold))
console.log(row('next visit (assets cached)', warm))

await browser.close()
await app.close()
await deps.close()

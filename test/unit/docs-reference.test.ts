import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { envSchema } from '../../src/config.ts'
import { errorCatalogue, errorWhen } from '../../src/errors.ts'
import { builtinProviders } from '../../src/providers/catalogue.ts'
import { formatReferencePages } from '../../scripts/format.ts'
import { configKeys, configLeaves } from '../../scripts/reference.ts'
import { buildOpenApi } from '../../src/openapi/document.ts'
import { DOC_PAGES, readPage } from '../support/docs.ts'

// docs/reference/ is written by `npm run docs` from the code. These tests fail when a page is stale,
// and when the code grows something the reference cannot describe: a config key without a
// description, an environment variable read in src/ that the environment page does not list, an error
// code the catalogue lists but nothing sends.

const root = fileURLToPath(new URL('../../', import.meta.url))
const read = (path: string): string => readFileSync(join(root, path), 'utf8')

/** Every .ts (and .mjs: src/start.mjs) file under src/, as [path, text]. */
function sources(dir = join(root, 'src')): [string, string][] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e): [string, string][] =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : /\.(ts|mjs)$/.test(e.name)
        ? [[relative(root, join(dir, e.name)), readFileSync(join(dir, e.name), 'utf8')]]
        : [],
  )
}

describe('generated reference pages', () => {
  it(
    'are up to date: regenerated in memory, each equals the committed page',
    { timeout: 60_000 },
    async () => {
      const pages = await formatReferencePages()
      expect(Object.keys(pages).length).toBe(6)
      for (const [path, text] of Object.entries(pages)) {
        expect(read(path), `${path} is stale: run npm run docs and commit it`).toBe(text)
      }
    },
  )

  it('every config file key has a description, and a type', () => {
    const keys = configKeys()
    expect(keys.length).toBeGreaterThan(100)
    const undescribed = keys.filter((k) => k.description.trim() === '').map((k) => k.path)
    expect(undescribed, 'add .describe() to these keys in src/config.ts').toEqual([])
    expect(keys.filter((k) => k.type === 'any').map((k) => k.path)).toEqual([])
  })

  it('lists keys at every depth, with defaults and environment overrides from the code', () => {
    const byPath = new Map(configKeys().map((k) => [k.path, k]))
    expect(byPath.get('server.port')).toMatchObject({
      default: '`8080`',
      env: 'PORT',
      bounds: '≥ 0, ≤ 65535',
    })
    expect(byPath.get('files.maxFileBytes')).toMatchObject({ env: 'GATEWAY_MAX_FILE_BYTES' })
    expect(byPath.get('providers.<name>.timeouts.totalMs')?.default).toBe('`600000` (10 min)')
    expect(byPath.get('accounts[].keys')?.description).toMatch(/sha256/)
    expect(byPath.get('predictions.webhooks.schedule')?.type).toBe('integer[]')
    expect(configLeaves().some((l) => l.path === 'models[].deployments[].weight')).toBe(true)
  })

  it('every environment variable read in src/ is on the environment page', () => {
    const page = read('docs/reference/environment.md')
    const documented = new Set([...page.matchAll(/^\| `([A-Z][A-Z0-9_]*)`/gm)].map((m) => m[1]))
    const read_ = new Set<string>([
      ...Object.keys(envSchema.shape),
      ...builtinProviders.flatMap((p) => [p.keyEnv, p.baseUrlEnv].filter((v) => v !== undefined)),
    ])
    // Reads straight off the environment anywhere in src/: process.env.X, env.X, env['X'], e.X (config.ts).
    for (const [, text] of sources()) {
      for (const m of text.matchAll(
        /\b(?:process\.env|env|e)(?:\.([A-Z][A-Z0-9_]+)\b|\[['"]([A-Z][A-Z0-9_]+)['"]\])/g,
      )) {
        read_.add((m[1] ?? m[2]) as string)
      }
    }
    const undescribed = Object.entries(envSchema.shape as Record<string, { description?: string }>)
      .filter(([, s]) => !s.description)
      .map(([name]) => name)
    expect(undescribed, 'add .describe() to these variables of envSchema (src/config.ts)').toEqual([])
    expect(read_.size).toBeGreaterThan(30)
    const missing = [...read_].filter((v) => !documented.has(v))
    expect(
      missing,
      'read in src/ but not documented: add them to envSchema (src/config.ts), then npm run docs',
    ).toEqual([])
  })

  it('every catalogued error code is sent from somewhere in src/', () => {
    const code = sources()
      .map(([path, text]) =>
        // The catalogue itself and the type-level lists of errors.ts are not senders.
        path === 'src/errors.ts' ? text.slice(text.indexOf('export function formatPath')) : text,
      )
      .join('\n')
    const silent = Object.keys(errorCatalogue).filter(
      (c) => !code.includes(`'${c}'`) && !code.includes(`"${c}"`),
    )
    expect(silent, 'catalogued but never sent: remove them from src/errors.ts or send them').toEqual([])
    for (const [c, when] of Object.entries(errorWhen)) expect(when.length, c).toBeGreaterThan(10)
  })

  it('every route a page names is a route of the OpenAPI document', () => {
    const doc = buildOpenApi() as { paths: Record<string, Record<string, unknown>> }
    const known = new Set(
      Object.entries(doc.paths).flatMap(([path, ops]) =>
        Object.keys(ops).map((m) => `${m.toUpperCase()} ${path.replace(/\{\w+\}/g, '{}')}`),
      ),
    )
    // Named on purpose though not ours: a route the docs say is not served, an upstream's route.
    const notOurs = new Set(['GET /v1/responses/{}/input_items', 'POST /images/generations'])
    const unknown: string[] = []
    for (const page of DOC_PAGES) {
      for (const m of readPage(page).matchAll(/`(GET|POST|PUT|DELETE|PATCH) (\/[^`?]*)/g)) {
        const path = (m[2] as string)
          .replace(/\{[^}]*\}/g, '{}')
          .replace(/…/g, '{}')
          .split(' ')[0]!
          .replace(/\/$/, '')
        const route = `${m[1]} ${path}`
        if (!known.has(route) && !notOurs.has(route)) unknown.push(`${page}: ${m[0]}`)
      }
    }
    expect(unknown, 'these pages name routes the gateway does not have').toEqual([])
  })

  it('every config key a page names exists', () => {
    const leaves = configLeaves().map((l) => l.path)
    // A key, or a section of keys (`providers.<name>.timeouts`), with `<name>` and `[]` matching any.
    const prefixes = new Set(
      leaves.flatMap((p) => p.split('.').map((_, i, a) => a.slice(0, i + 1).join('.'))),
    )
    const pattern = (p: string): RegExp =>
      new RegExp(
        `^${p
          .replace(/[.[\]]/g, (c) => `\\${c}`)
          .replace(/<name>/g, '[^.]+')
          .replace(/\\\[\\\]/g, '(\\[\\d*\\])?')}$`,
      )
    const known = [...prefixes].map(pattern)
    const unknown: string[] = []
    for (const page of DOC_PAGES.filter((p) => !p.startsWith('docs/reference/'))) {
      const named = readPage(page).matchAll(
        /`((?:server|limits|files|database|routing|predictions|providers|models|accounts)(?:\[\d*\])?\.[\w.<>[\]-]+)`/g,
      )
      for (const m of named) if (!known.some((r) => r.test(m[1] as string))) unknown.push(`${page}: ${m[1]}`)
    }
    expect(known.some((r) => r.test('providers.openai.timeouts'))).toBe(true)
    expect(known.some((r) => r.test('server.noSuchKey'))).toBe(false)
    expect(unknown, 'these pages name config keys that do not exist').toEqual([])
  })

  it('every "status `code`" a page names is that code with that status in the catalogue', () => {
    // Upstreams' own statuses and codes, named where the docs say how they map.
    const upstreams = new Set(['529 overloaded_error'])
    const catalogue = errorCatalogue as Record<string, { status: number }>
    const wrong: string[] = []
    let checked = 0
    for (const page of DOC_PAGES) {
      for (const m of readPage(page).matchAll(/\b([1-5]\d\d)\*{0,2}\s+`([a-z_]+)`/g)) {
        checked++
        const [status, code] = [Number(m[1]), m[2] as string]
        if (catalogue[code]?.status !== status && !upstreams.has(`${status} ${code}`)) {
          wrong.push(`${page}: ${status} ${code} (catalogue: ${catalogue[code]?.status ?? 'no such code'})`)
        }
      }
    }
    expect(checked).toBeGreaterThan(40)
    expect(wrong).toEqual([])
  })

  it('every gateway variable a page names is on the environment page', () => {
    const documented = new Set(
      [...read('docs/reference/environment.md').matchAll(/^\| `([A-Z][A-Z0-9_]*)`/gm)].map((m) => m[1]),
    )
    const named = DOC_PAGES.flatMap((page) =>
      [
        ...readPage(page).matchAll(/`((?:GATEWAY|MOCK)_[A-Z0-9_]+|[A-Z]+_(?:API_KEY|API_TOKEN|BASE_URL))`/g),
      ].map((m) => `${page}: ${m[1]}`),
    )
    expect(named.length).toBeGreaterThan(20)
    expect(named.filter((n) => !documented.has(n.split(': ')[1]))).toEqual([])
  })
})

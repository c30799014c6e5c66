import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { envSchema } from '../../src/config.ts'
import { errorCatalogue } from '../../src/errors.ts'
import { builtinProviders } from '../../src/providers/catalogue.ts'
import { formatReferencePages } from '../../scripts/format.ts'
import { configKeys, configLeaves } from '../../scripts/reference.ts'

// docs/reference/ is written by `npm run docs` from the code. These tests fail when a page is stale,
// and when the code grows something the reference cannot describe: a config key without a
// description, an environment variable read in src/ that the environment page does not list, an error
// code the catalogue lists but nothing sends.

const root = fileURLToPath(new URL('../../', import.meta.url))
const read = (path: string): string => readFileSync(join(root, path), 'utf8')

/** Every .ts file under src/, as [path, text]. */
function sources(dir = join(root, 'src')): [string, string][] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e): [string, string][] =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : e.name.endsWith('.ts')
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
    for (const [c, e] of Object.entries(errorCatalogue)) expect(e.when.length, c).toBeGreaterThan(10)
  })
})

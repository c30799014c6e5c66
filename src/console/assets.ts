import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { extname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'

// The console's browser files: plain ES modules and CSS from the repository's console/ folder, and
// the chart library from its npm package. Read once at start; their URLs carry a hash of all their
// contents (/console/assets/<hash>/app.js), so they are cached for good and a new version is a new URL.

export interface Asset {
  body: Buffer
  /** Gzipped body, when smaller. */
  gzip?: Buffer
  type: string
}

export interface ConsoleAssets {
  /** The hash in asset URLs. */
  version: string
  /** `/console/assets/<version>` */
  base: string
  files: Map<string, Asset>
  /** The page, with asset URLs filled in. */
  html: string
}

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.html': 'text/html; charset=utf-8',
}

export const CONSOLE_DIR = fileURLToPath(new URL('../../console/', import.meta.url))

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name)
    return statSync(path).isDirectory() ? walk(path) : [path]
  })
}

export function loadConsoleAssets(dir: string = CONSOLE_DIR): ConsoleAssets {
  if (!existsSync(join(dir, 'index.html'))) {
    throw new Error(
      `the console's files are missing (${dir}): ship the console/ folder, or set GATEWAY_CONSOLE=off`,
    )
  }
  const require = createRequire(import.meta.url)
  const sources = new Map<string, Buffer>()
  for (const path of walk(dir)) {
    const name = relative(dir, path).split(sep).join('/')
    if (name !== 'index.html' && TYPES[extname(name)]) sources.set(name, readFileSync(path))
  }
  sources.set('vendor/uplot.js', readFileSync(require.resolve('uplot/dist/uPlot.esm.js')))
  sources.set('vendor/uplot.css', readFileSync(require.resolve('uplot/dist/uPlot.min.css')))

  const hash = createHash('sha256')
  for (const name of [...sources.keys()].sort()) hash.update(name).update('\0').update(sources.get(name)!)
  const version = hash.digest('hex').slice(0, 16)
  const base = `/console/assets/${version}`

  const files = new Map<string, Asset>()
  for (const [name, body] of sources) {
    const gz = gzipSync(body, { level: 9 })
    files.set(name, {
      body,
      type: TYPES[extname(name)] ?? 'application/octet-stream',
      ...(gz.length < body.length ? { gzip: gz } : {}),
    })
  }
  // Every module is preloaded at once instead of found import by import.
  const preload = [...sources.keys()]
    .filter((n) => n.endsWith('.js'))
    .sort()
    .map((n) => `<link rel="modulepreload" href="${base}/${n}">`)
    .join('\n    ')
  const html = readFileSync(join(dir, 'index.html'), 'utf8')
    .replaceAll('{{assets}}', base)
    .replace('{{preload}}', preload)
  return { version, base, files, html }
}

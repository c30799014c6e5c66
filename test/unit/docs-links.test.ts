import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { DOC_PAGES } from '../support/docs.ts'

// The README is a short entry point; the reference lives in docs/. Every page must be reachable from
// the README, and every relative link of every page must lead to a file that exists.

const root = fileURLToPath(new URL('../../', import.meta.url))
const read = (page: string): string => readFileSync(join(root, page), 'utf8')
const relativeLinks = (text: string): string[] =>
  [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
    .map((m) => m[1] as string)
    .filter((href) => !/^[a-z]+:/.test(href))

describe('documentation pages', () => {
  it('every page in docs/ is linked from the README and read by the doc tests', () => {
    const pages = readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'))
    const linked = relativeLinks(read('README.md'))
    for (const page of pages) {
      expect(linked, page).toContain(`docs/${page}`)
      expect(DOC_PAGES as readonly string[], page).toContain(`docs/${page}`)
    }
  })

  it('every relative link of every page leads to a file', () => {
    for (const page of DOC_PAGES) {
      for (const href of relativeLinks(read(page))) {
        expect(existsSync(normalize(join(root, dirname(page), href))), `${page} → ${href}`).toBe(true)
      }
    }
  })

  it('the README stays an entry point: under 15 KB', () => {
    expect(Buffer.byteLength(read('README.md'))).toBeLessThan(15 * 1024)
  })
})

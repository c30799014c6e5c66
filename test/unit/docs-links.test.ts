import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, normalize, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { DOC_PAGES } from '../support/docs.ts'

// The README is a short entry point; the documentation lives in docs/, one page a topic. Every page must
// be reachable from the README, every relative link must lead to a file that exists, and prose stays
// readable in a terminal and a diff: no line of prose over 120 characters (tables and code aside).

const root = fileURLToPath(new URL('../../', import.meta.url))
const read = (page: string): string => readFileSync(join(root, page), 'utf8')
const relativeLinks = (text: string): string[] =>
  [...text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)]
    .map((m) => m[1] as string)
    .filter((href) => !/^[a-z]+:/.test(href))

/** Every .md file under docs/, as a path from the repository root. */
function docsFiles(dir = join(root, 'docs')): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? docsFiles(join(dir, e.name))
      : e.name.endsWith('.md')
        ? [relative(root, join(dir, e.name))]
        : [],
  )
}

/** The lines of a page that are prose: outside fenced code and not table rows. */
function proseLines(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = []
  let fenced = false
  text.split('\n').forEach((l, i) => {
    if (/^\s*```/.test(l)) {
      fenced = !fenced
      return
    }
    if (!fenced && !/^\s*\|/.test(l)) out.push({ line: i + 1, text: l })
  })
  return out
}

describe('documentation pages', () => {
  it('every page in docs/ is linked from the README and read by the doc tests', () => {
    const linked = relativeLinks(read('README.md'))
    for (const page of docsFiles()) {
      expect(linked, `add a link to ${page} in README.md`).toContain(page)
      expect(DOC_PAGES as readonly string[], `add ${page} to DOC_PAGES (test/support/docs.ts)`).toContain(
        page,
      )
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

  it('no line of prose is over 120 characters', () => {
    const long = DOC_PAGES.flatMap((page) =>
      proseLines(read(page))
        .filter((l) => [...l.text].length > 120)
        .map((l) => `${page}:${l.line} (${[...l.text].length} characters)`),
    )
    expect(long, 'wrap these lines (npx prettier --prose-wrap always <page>)').toEqual([])
  })

  it('the docs stand alone: no page points at a file outside the repository', () => {
    for (const page of DOC_PAGES) {
      // The contract and its decisions are docs/design pages; the original notes are not shipped.
      expect(read(page), page).not.toMatch(/(?<![\w/-])(interface|decisions)\.md/)
    }
  })
})

describe('prose lines', () => {
  it('leave out fenced code and table rows', () => {
    const text = ['a', '```sh', 'x'.repeat(200), '```', '| ' + 'y'.repeat(200) + ' |', 'b'].join('\n')
    expect(proseLines(text).map((l) => l.text)).toEqual(['a', 'b'])
  })
})

import { readFileSync } from 'node:fs'

// The README and the docs/ pages, in the order the README's Documentation list gives them: the tests
// that check examples, tables and claims look sections up by their `## ` heading in this one text.

export const DOC_PAGES = [
  'README.md',
  'docs/api.md',
  'docs/billing.md',
  'docs/configuration.md',
  'docs/routing.md',
  'docs/mock.md',
  'docs/files.md',
  'docs/predictions.md',
  'docs/providers.md',
  'docs/storage.md',
  'docs/console.md',
  'docs/operations.md',
  'docs/development.md',
] as const

/** Every page's text, one after the other. */
export function readDocs(): string {
  return DOC_PAGES.map((p) => readFileSync(new URL(`../../${p}`, import.meta.url), 'utf8')).join('\n')
}

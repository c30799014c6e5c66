import { readFileSync } from 'node:fs'

// The README and every docs/ page, in reading order (the README's Documentation list gives the same
// order). docs-links.test.ts checks that every page in docs/ is here and linked from the README.

export const DOC_PAGES = [
  'README.md',
  'docs/getting-started.md',
  'docs/clients/chat.md',
  'docs/clients/responses.md',
  'docs/clients/messages.md',
  'docs/clients/embeddings.md',
  'docs/clients/files.md',
  'docs/clients/predictions.md',
  'docs/clients/webhooks.md',
  'docs/clients/routing.md',
  'docs/clients/keys.md',
  'docs/clients/errors.md',
  'docs/console.md',
  'docs/operators/deploy.md',
  'docs/operators/production-checklist.md',
  'docs/operators/configuration.md',
  'docs/operators/accounts-and-billing.md',
  'docs/operators/providers.md',
  'docs/operators/routing.md',
  'docs/operators/sqlite.md',
  'docs/operators/postgresql.md',
  'docs/operators/observability.md',
  'docs/operators/shutdown.md',
  'docs/operators/security.md',
  'docs/reference/configuration.md',
  'docs/reference/environment.md',
  'docs/reference/errors.md',
  'docs/reference/models.md',
  'docs/reference/metrics.md',
  'docs/reference/api.md',
  'docs/design/api-contract.md',
  'docs/design/decisions.md',
  'docs/design/billing.md',
  'docs/design/durability.md',
  'docs/design/consistency.md',
  'docs/design/routing.md',
  'docs/benchmarks.md',
  'docs/development.md',
  'CHANGELOG.md',
] as const

export type DocPage = (typeof DOC_PAGES)[number]

/** One page's text. */
export function readPage(page: DocPage): string {
  return readFileSync(new URL(`../../${page}`, import.meta.url), 'utf8')
}

/** Every page's text, one after the other. */
export function readDocs(): string {
  return DOC_PAGES.map(readPage).join('\n')
}

/** The fenced blocks of a page whose info string is `lang` (`json`, `sh`, …), in order. */
export function codeBlocks(text: string, lang: string): string[] {
  const fence = new RegExp('^```' + lang + '\\n([\\s\\S]*?)^```', 'gm')
  return [...text.matchAll(fence)].map((m) => m[1] as string)
}

import { format, resolveConfig } from 'prettier'
import { renderReferencePages } from './reference.ts'

/** The reference pages as `npm run docs` writes them: rendered, then formatted as `npm run format` would. */
export async function formatReferencePages(): Promise<Record<string, string>> {
  const root = new URL('../', import.meta.url)
  const pages = await renderReferencePages()
  const out: Record<string, string> = {}
  for (const [path, text] of Object.entries(pages)) {
    const filepath = new URL(path, root).pathname
    const options = (await resolveConfig(filepath)) ?? {}
    // Prose wrapped like the hand-written pages: no prose line over 120 characters.
    out[path] = await format(text, { ...options, filepath, proseWrap: 'always' })
  }
  return out
}

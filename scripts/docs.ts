import { writeFile } from 'node:fs/promises'
import { formatReferencePages } from './format.ts'

// npm run docs: writes docs/reference/*.md from the code (scripts/reference.ts says from where).

const root = new URL('../', import.meta.url)
const pages = await formatReferencePages()
for (const [path, text] of Object.entries(pages)) {
  await writeFile(new URL(path, root), text)
  console.log(`wrote ${path}`)
}

import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

// The layout of src/ is the architecture (docs/development.md): every noun has one home, a folder imports
// from the floors below it, and a function is short enough to read at once. These checks keep it so.

const root = fileURLToPath(new URL('../../', import.meta.url))
const src = join(root, 'src')

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  )
}

const files = sourceFiles(src).map((path) => ({
  path,
  name: relative(root, path),
  ast: ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true),
}))

/** Every relative module a file imports or re-exports, resolved to a path under the repository. */
function importsOf(file: (typeof files)[number]): string[] {
  const out: string[] = []
  for (const s of file.ast.statements) {
    if ((ts.isImportDeclaration(s) || ts.isExportDeclaration(s)) && s.moduleSpecifier) {
      const spec = (s.moduleSpecifier as ts.StringLiteral).text
      if (spec.startsWith('.')) out.push(relative(root, resolve(dirname(file.path), spec)))
    }
  }
  return out
}

const MAX_FUNCTION_LINES = 150

describe('the layout of src/', () => {
  it(`has no function longer than ${MAX_FUNCTION_LINES} lines`, () => {
    const long: string[] = []
    for (const f of files) {
      const visit = (n: ts.Node): void => {
        if (
          ts.isFunctionDeclaration(n) ||
          ts.isFunctionExpression(n) ||
          ts.isArrowFunction(n) ||
          ts.isMethodDeclaration(n)
        ) {
          const first = f.ast.getLineAndCharacterOfPosition(n.getStart()).line
          const last = f.ast.getLineAndCharacterOfPosition(n.getEnd()).line
          if (last - first + 1 > MAX_FUNCTION_LINES)
            long.push(`${f.name}:${first + 1} (${last - first + 1} lines)`)
        }
        ts.forEachChild(n, visit)
      }
      visit(f.ast)
    }
    expect(long).toEqual([])
  })

  it('keeps config.ts to the composition root: no store, billing, routing or provider file imports it', () => {
    const offenders = files
      .filter((f) => /^src\/(store|billing|routing|providers)\//.test(f.name))
      .filter((f) => importsOf(f).includes('src/config.ts'))
      .map((f) => f.name)
    expect(offenders).toEqual([])
  })

  it('keeps domain/ to types that import nothing outside it', () => {
    const domain = files.filter((f) => f.name.startsWith('src/domain/'))
    expect(domain.length).toBeGreaterThan(0)
    const outside = domain.flatMap((f) =>
      importsOf(f)
        .filter((to) => !to.startsWith('src/domain/'))
        .map((to) => `${f.name} → ${to}`),
    )
    expect(outside).toEqual([])
    // Types only: no value is declared there (interfaces, type aliases and type-only exports).
    const values = domain.flatMap((f) =>
      f.ast.statements
        .filter((s) => !ts.isInterfaceDeclaration(s) && !ts.isTypeAliasDeclaration(s))
        .filter((s) => !(ts.isImportDeclaration(s) && s.importClause?.isTypeOnly))
        .filter((s) => !(ts.isExportDeclaration(s) && s.isTypeOnly))
        .map((s) => `${f.name}: ${s.getText().split('\n')[0]}`),
    )
    expect(values).toEqual([])
  })

  it('gives every store backend the same file names per concern', () => {
    const names = (backend: string): string[] =>
      readdirSync(join(src, 'store', backend)).filter((n) => n.endsWith('.ts'))
    const shared = [
      'accounts.ts',
      'ledger.ts',
      'generations.ts',
      'keys.ts',
      'files.ts',
      'rate-limits.ts',
      'tasks.ts',
    ]
    for (const backend of ['memory', 'sqlite', 'postgres']) {
      expect(existsSync(join(src, 'store', backend, 'index.ts')), `${backend}/index.ts`).toBe(true)
      expect(names(backend), backend).toEqual(expect.arrayContaining(shared))
    }
    for (const backend of ['sqlite', 'postgres']) expect(names(backend)).toContain('migrations.ts')
  })
})

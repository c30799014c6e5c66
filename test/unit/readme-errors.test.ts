import { describe, expect, it } from 'vitest'
import { errorCatalogue } from '../../src/errors.ts'
import { readDocs } from '../support/docs.ts'

// The README's error table is what users code against: it must list every code the gateway can
// answer, each with the status and type the catalogue gives it, and nothing else.

const readme = readDocs()

function tableRows(): { status: number; type: string; codes: string[] }[] {
  const section = readme.slice(
    readme.indexOf('### Errors'),
    readme.indexOf('## Accounts, credits and billing'),
  )
  return section
    .split('\n')
    .filter((l) => /^\|\s*\d{3}\s*\|/.test(l))
    .map((l) => {
      const [, status, type, codes] = l.split('|').map((c) => c.trim())
      return {
        status: Number(status),
        type: (type as string).replaceAll('`', ''),
        codes: [...(codes as string).matchAll(/`([a-z_]+)`/g)].map((m) => m[1] as string),
      }
    })
}

describe('README error table', () => {
  it('lists exactly the catalogue’s codes, each with its status and type', () => {
    const documented = tableRows().flatMap((r) =>
      r.codes.map((code) => ({ code, status: r.status, type: r.type })),
    )
    const catalogue = Object.entries(errorCatalogue).map(([code, e]) => ({
      code,
      status: e.status,
      type: e.type,
    }))
    const byCode = (a: { code: string }, b: { code: string }) => a.code.localeCompare(b.code)
    expect(documented.sort(byCode)).toEqual(catalogue.sort(byCode))
  })
})

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { ENV_VARIABLES } from '../../src/config.ts'
import { builtinProviders } from '../../src/providers/catalogue.ts'
import { useServerProcesses } from '../support/server-process.ts'

// `npm start` reads .env (the real environment wins), and .env.example lists every variable read.

const root = new URL('../..', import.meta.url).pathname
const start = useServerProcesses()
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

/** The node options of the `start` script, exactly as package.json has them. */
function startScriptNodeArgs(): string[] {
  const script = (
    JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }
  ).scripts.start
  const words = script.split(/\s+/)
  expect(words[0]).toBe('node')
  return words.slice(1, -1)
}

const admin = (origin: string, key: string) =>
  fetch(`${origin}/admin/accounts`, { headers: { authorization: `Bearer ${key}` } }).then((r) => r.status)

describe('.env', () => {
  it('is read by npm start, and a variable set in the environment wins over it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'junction-dotenv-'))
    dirs.push(dir)
    writeFileSync(
      join(dir, '.env'),
      'GATEWAY_ADMIN_KEY=admin-key-from-dotenv-file\nGATEWAY_DATABASE_URL=memory\n',
    )
    const fromFile = await start({}, dir, startScriptNodeArgs())
    expect(await admin(fromFile.origin, 'admin-key-from-dotenv-file')).toBe(200)

    const fromEnv = await start(
      { GATEWAY_ADMIN_KEY: 'admin-key-from-the-environment' },
      dir,
      startScriptNodeArgs(),
    )
    expect(await admin(fromEnv.origin, 'admin-key-from-the-environment')).toBe(200)
    expect(await admin(fromEnv.origin, 'admin-key-from-dotenv-file')).toBe(401)
  })

  it('.env.example lists exactly the variables the gateway reads', () => {
    const example = readFileSync(join(root, '.env.example'), 'utf8')
    const listed = [...example.matchAll(/^#?\s*([A-Z][A-Z0-9_]+)=/gm)].map((m) => m[1] as string)
    const read = [
      ...ENV_VARIABLES,
      ...builtinProviders
        .flatMap((p) => [p.keyEnv, p.baseUrlEnv])
        .filter((v): v is string => v !== undefined),
    ]
    expect([...new Set(listed)].sort()).toEqual([...new Set(read)].sort())
  })
})

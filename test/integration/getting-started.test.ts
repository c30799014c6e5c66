import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { readPage } from '../support/docs.ts'
import { startPath, stopServer, useServerProcesses, type ServerProcess } from '../support/server-process.ts'

// docs/getting-started.md, walked top to bottom as a reader would: its shell blocks run in bash, in one
// working directory (so one SQLite database, ./data/junction.db), against one gateway that the page's
// `npm start` blocks start and the reader's Ctrl-C (SIGINT) stops. Each command's output is compared with
// the text block the page shows after it, ids and times masked; an id the page shows (a generation, a
// file, a key) and later pastes into a command is replaced by the id that really came back.

const run = promisify(execFile)
const start = useServerProcesses()
const repo = fileURLToPath(new URL('../../', import.meta.url))
const pkg = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8')) as {
  name: string
  version: string
  scripts: { start: string }
}
const workdir = mkdtempSync(join(tmpdir(), 'junction-getting-started-'))
afterAll(() => rmSync(workdir, { recursive: true, force: true }))

interface Step {
  /** The shell block as printed. */
  commands: string
  /** The text block after it, if any: what it printed. */
  expected?: string
}

/** The page's shell blocks, each with the text block that follows it. */
function steps(page: string): Step[] {
  const blocks = [...page.matchAll(/^```(sh|text)\n([\s\S]*?)^```/gm)].map((m) => ({
    lang: m[1] as string,
    body: m[2] as string,
  }))
  const out: Step[] = []
  for (const b of blocks) {
    if (b.lang === 'sh') out.push({ commands: b.body })
    else if (out.length > 0 && out.at(-1)!.expected === undefined) out.at(-1)!.expected = b.body
    else throw new Error(`a text block without its command: ${b.body.slice(0, 80)}`)
  }
  return out
}

/** Ids that differ from run to run; the page's are mapped to the real ones by order of appearance. */
const ID_PATTERNS = [
  /gen-[A-Za-z0-9_-]{24}/g,
  /file-[A-Za-z0-9_-]{24}/g,
  /sk-jn-[A-Za-z0-9_-]{32}/g,
  /key_[0-9a-f]{16}/g,
  /\b[0-9a-f]{32}\b/g,
]

/** Times, durations and the machine's paths: masked on both sides. */
function mask(text: string): string {
  let out = text
  for (const p of ID_PATTERNS)
    out = out.replace(p, (id) => `${/^(gen-|file-|sk-jn-|key_)?/.exec(id)?.[0]}<id>`)
  return out
    .replace(/"prefix":"sk-jn-[^"]*"/g, '"prefix":"sk-jn-<id>"')
    .replace(/"(name|label)":"sk-jn-[\w-]{4}\.\.\."/g, '"$1":"sk-jn-<id>..."')
    .replace(/"hash":"[0-9a-f]{64}"/g, '"hash":"<hash>"')
    .replace(/"(created|created_at|createAt|startedAt|time)":("[^"]*"|\d+)/g, '"$1":<time>')
    .replace(/"(generationTime|latency|durationMs)":[\d.]+/g, '"$1":<ms>')
    .replace(/"location":"[^"]*"/g, '"location":<path>')
    .replace(/http:\/\/[\w.]+:\d+/g, '<address>')
    .trimEnd()
}

/** Pairs the page's ids with the ones that came back, in order. */
function learnIds(expected: string, actual: string, ids: Map<string, string>): void {
  for (const p of ID_PATTERNS) {
    const shown = expected.match(p) ?? []
    const real = actual.match(p) ?? []
    shown.forEach((id, i) => {
      if (real[i] !== undefined && !ids.has(id)) ids.set(id, real[i])
    })
  }
}

/** `npm start` with `VAR=value` prefixes: the variables, or null for another command. */
function startLine(commands: string): Record<string, string> | null {
  const m = /^((?:[A-Z_]+=\S+ )*)npm start\n?$/.exec(commands)
  if (!m) return null
  return Object.fromEntries(
    (m[1] ?? '')
      .trim()
      .split(/\s+/)
      .filter((kv) => kv !== '')
      .map((kv) => kv.split('=') as [string, string]),
  )
}

/** A JSON log line's level and message, the address masked. */
const logEntry = (line: string): string => {
  const entry = JSON.parse(line) as { level: number; msg: string }
  return `${entry.level} ${mask(entry.msg)}`
}

describe('docs/getting-started.md', () => {
  it('unit: steps pair each command with its output, and masks hide only what varies', () => {
    const page = '```sh\na\n```\n\n```text\nA\n```\n\n```sh\nb\n```\n'
    expect(steps(page)).toEqual([{ commands: 'a\n', expected: 'A\n' }, { commands: 'b\n' }])
    expect(mask('{"id":"gen-yeFjI7aBsAlqc80yTYjJutNJ","created":1795674145,"cost":0.1}')).toBe(
      '{"id":"gen-<id>","created":<time>,"cost":0.1}',
    )
  })

  it('walks the page as printed: every command gives the output it shows', { timeout: 120_000 }, async () => {
    symlinkSync(join(repo, 'examples'), join(workdir, 'examples'))
    const ids = new Map<string, string>()
    let server: ServerProcess | undefined
    let ran = 0
    // The reader's second terminal is one shell: what a block exports, the next blocks still have.
    const exported: string[] = []
    for (const step of steps(readPage('docs/getting-started.md'))) {
      // Installing is what the reader does first; this checkout is installed already.
      if (step.commands.trim() === 'npm ci') continue
      const env = startLine(step.commands)
      if (env !== null) {
        if (server) {
          // The reader's Ctrl-C.
          await stopServer(server, 'SIGINT')
          expect(server.output()).toContain('"msg":"stopped"')
        }
        // `npm start` as package.json says: its node options, its entry point (the compile cache, then
        // our server).
        const script = pkg.scripts.start
        const nodeArgs = script.split(' ').filter((a) => a.startsWith('--'))
        expect(script).toBe(`node ${nodeArgs.join(' ')} src/start.mjs`)
        server = await start(env, workdir, nodeArgs, startPath)
        // npm's own lines first: the script's name and command, as the page shows them.
        const shown = (step.expected ?? '').replace(/^\n/, '').split('\n')
        expect(shown.slice(0, 3)).toEqual([`> ${pkg.name}@${pkg.version} start`, `> ${script}`, ''])
        const printed = server
          .output()
          .split('\n')
          .filter((l) => l.trim() !== '')
          .map((l) => (l.startsWith('{') ? logEntry(l) : l))
        const expected = shown
          .slice(3)
          .filter((l) => l.trim() !== '')
          .map((l) => (l.startsWith('{') ? logEntry(l) : l))
        expect(printed, step.commands).toEqual(expected)
        ran++
        continue
      }
      expect(server, 'the page starts the gateway before its first request').toBeDefined()
      let script = step.commands.replaceAll('localhost:8080', server!.origin.replace('http://', ''))
      for (const [shown, real] of ids) script = script.replaceAll(shown, real)
      const { stdout } = await run('bash', ['-c', [...exported, script].join('\n')], { cwd: workdir })
      exported.push(...script.split('\n').filter((l) => l.startsWith('export ')))
      expect(mask(stdout), step.commands).toBe(mask(step.expected ?? ''))
      learnIds(step.expected ?? '', stdout, ids)
      ran++
    }
    if (server) await stopServer(server, 'SIGINT')
    // Every step ran: the three starts and every request.
    expect(ran).toBeGreaterThanOrEqual(18)
  })
})

import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { pino } from 'pino'
import { afterEach, describe, expect, it } from 'vitest'
import { createLocalFileStorage } from '../../../src/files/local-storage.ts'
import { sweepOrphans } from '../../../src/files/orphan-sweep.ts'
import { createMemoryFileStore } from '../../../src/store/memory/files.ts'

const HOUR = 3_600_000
let dirs: string[] = []
afterEach(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
  dirs = []
})

/** Sets a file's modification time, as if it was written `ageMs` before `now`. */
const age = (path: string, now: number, ageMs: number) =>
  utimes(path, (now - ageMs) / 1000, (now - ageMs) / 1000)

async function setup() {
  const dir = await mkdtemp(join(tmpdir(), 'junction-orphans-'))
  dirs.push(dir)
  const now = Date.now()
  const storage = createLocalFileStorage(dir, { now: () => now })
  const files = createMemoryFileStore()
  const put = async (text: string, ageMs: number) => {
    const { key, bytes } = await storage.write(Readable.from([Buffer.from(text)]), { maxBytes: 1000 })
    await age(join(dir, key), now, ageMs)
    return { key, bytes }
  }
  const record = async (key: string, bytes: number) => {
    const quota = { maxFiles: 10, maxBytes: 1e6 }
    const r = await files.reserve('acct', quota, now, 60_000)
    if (!r.ok) throw new Error(r.reason)
    await files.commit(
      r.token,
      {
        id: `file-${key}`,
        accountId: 'acct',
        bytes,
        createdAt: now,
        filename: 'a.txt',
        purpose: 'user_data',
        contentType: 'text/plain',
        storageKey: key,
      },
      quota,
      now,
    )
  }
  const sweep = () =>
    sweepOrphans({ storage, files, graceMs: HOUR, now: () => now, log: pino({ level: 'silent' }) })
  return { dir, now, put, record, sweep }
}

describe('sweepOrphans', () => {
  it('removes unrecorded bytes past the grace period and keeps recorded or young ones', async () => {
    const { dir, put, record, sweep } = await setup()
    const oldOrphan = await put('crashed between bytes and record', 2 * HOUR)
    const youngOrphan = await put('an upload still committing', HOUR / 2)
    const recordedOld = await put('a file of long ago', 30 * 24 * HOUR)
    await record(recordedOld.key, recordedOld.bytes)

    expect(await sweep()).toEqual({ orphans: 1, temps: 0 })
    const left = (await readdir(dir)).sort()
    expect(left).toEqual([youngOrphan.key, recordedOld.key].sort())
    expect(left).not.toContain(oldOrphan.key)
    // Nothing more to do the second time.
    expect(await sweep()).toEqual({ orphans: 0, temps: 0 })
  })

  it('removes temp files of dead uploads on every sweep, not only at the first upload', async () => {
    const { dir, now, put, sweep } = await setup()
    await put('first upload creates the directory', 0)
    const dead = join(dir, '.tmp-0123456789abcdef0123456789abcdef')
    const live = join(dir, '.tmp-fedcba9876543210fedcba9876543210')
    await writeFile(dead, 'half an upload')
    await writeFile(live, 'an upload in progress')
    await age(dead, now, 3 * HOUR)
    expect(await sweep()).toEqual({ orphans: 0, temps: 1 })
    const left = await readdir(dir)
    expect(left).toContain('.tmp-fedcba9876543210fedcba9876543210')
    expect(left).not.toContain('.tmp-0123456789abcdef0123456789abcdef')
  })

  it('does nothing when no file was ever stored (no directory)', async () => {
    const storage = createLocalFileStorage(join(tmpdir(), `junction-never-${process.pid}-${Date.now()}`))
    const result = await sweepOrphans({
      storage,
      files: createMemoryFileStore(),
      graceMs: HOUR,
      now: Date.now,
      log: pino({ level: 'silent' }),
    })
    expect(result).toEqual({ orphans: 0, temps: 0 })
  })
})

import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { text } from 'node:stream/consumers'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { createLocalFileStorage } from '../../../src/files/local-storage.ts'
import { FileTooLargeError, StorageObjectNotFoundError } from '../../../src/files/storage.ts'

function chunks(count: number, size: number, fill = 0x61): Readable {
  return Readable.from(
    (function* () {
      for (let i = 0; i < count; i++) yield Buffer.alloc(size, fill)
    })(),
  )
}

describe('local file storage', () => {
  let dir: string

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'junction-storage-'))
  })
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('writes a stream under a random key and reads it back whole or streamed', async () => {
    const storage = createLocalFileStorage(dir)
    const a = await storage.write(Readable.from([Buffer.from('hello '), Buffer.from('world')]), {
      maxBytes: 100,
    })
    const b = await storage.write(Readable.from([Buffer.from('hello world')]), { maxBytes: 100 })
    expect(a.bytes).toBe(11)
    expect(a.key).toMatch(/^[0-9a-f]{32}$/)
    expect(b.key).not.toBe(a.key)
    expect((await storage.read(a.key)).toString()).toBe('hello world')
    const opened = await storage.open(b.key)
    expect(opened.bytes).toBe(11)
    expect(await text(opened.stream)).toBe('hello world')
    // Only the two objects, no temp files left.
    expect((await readdir(dir)).sort()).toEqual([a.key, b.key].sort())
  })

  it('accepts exactly maxBytes and refuses one more, leaving nothing behind', async () => {
    const storage = createLocalFileStorage(dir)
    const ok = await storage.write(chunks(4, 256), { maxBytes: 1024 })
    expect(ok.bytes).toBe(1024)
    const err = await storage.write(chunks(5, 256), { maxBytes: 1024 }).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(FileTooLargeError)
    expect(await readdir(dir)).toEqual([ok.key])
  })

  it('stops reading the source as soon as the limit is passed', async () => {
    const storage = createLocalFileStorage(dir)
    let produced = 0
    const endless = new Readable({
      read() {
        produced += 64 * 1024
        this.push(Buffer.alloc(64 * 1024))
      },
    })
    await expect(storage.write(endless, { maxBytes: 1024 * 1024 })).rejects.toBeInstanceOf(FileTooLargeError)
    expect(produced).toBeLessThan(4 * 1024 * 1024)
    expect(endless.destroyed).toBe(true)
    expect(await readdir(dir)).toEqual([])
  })

  it('removes the temp file when the source fails mid-way', async () => {
    const storage = createLocalFileStorage(dir)
    const failing = Readable.from(
      (async function* () {
        yield Buffer.alloc(1000)
        throw new Error('client went away')
      })(),
    )
    await expect(storage.write(failing, { maxBytes: 1e6 })).rejects.toThrow('client went away')
    expect(await readdir(dir)).toEqual([])
  })

  it('removes objects; a missing or malformed key is not found, never a path', async () => {
    const storage = createLocalFileStorage(dir)
    const { key } = await storage.write(Readable.from([Buffer.from('x')]), { maxBytes: 10 })
    await storage.remove(key)
    await storage.remove(key)
    expect(await readdir(dir)).toEqual([])
    await expect(storage.read(key)).rejects.toBeInstanceOf(StorageObjectNotFoundError)
    await expect(storage.open(key)).rejects.toBeInstanceOf(StorageObjectNotFoundError)
    await expect(storage.read('../../etc/passwd')).rejects.toBeInstanceOf(StorageObjectNotFoundError)
    await expect(storage.remove('../outside')).rejects.toBeInstanceOf(StorageObjectNotFoundError)
  })

  it('creates its directory on first write and sweeps stale temp files of crashed uploads', async () => {
    const nested = join(dir, 'a', 'b')
    const now = Date.now()
    const storage = createLocalFileStorage(nested, { now: () => now })
    await expect(readdir(nested)).rejects.toThrow()
    await storage.write(Readable.from([Buffer.from('first')]), { maxBytes: 10 })
    // Simulate a crash: two temp files, one abandoned two hours ago, one still being written.
    const stale = join(nested, '.tmp-00000000000000000000000000000001')
    const fresh = join(nested, '.tmp-00000000000000000000000000000002')
    await writeFile(stale, 'half')
    await writeFile(fresh, 'half')
    await utimes(stale, new Date(now - 2 * 3600_000), new Date(now - 2 * 3600_000))
    const restarted = createLocalFileStorage(nested, { now: () => now })
    await restarted.write(Readable.from([Buffer.from('second')]), { maxBytes: 10 })
    const names = await readdir(nested)
    expect(names).not.toContain('.tmp-00000000000000000000000000000001')
    expect(names).toContain('.tmp-00000000000000000000000000000002')
  })

  it('recreates its directory when it was removed while running', async () => {
    const nested = join(dir, 'files')
    const storage = createLocalFileStorage(nested)
    await storage.write(Readable.from([Buffer.from('one')]), { maxBytes: 10 })
    await rm(nested, { recursive: true })
    const { key } = await storage.write(Readable.from([Buffer.from('two')]), { maxBytes: 10 })
    expect((await storage.read(key)).toString()).toBe('two')
  })
})

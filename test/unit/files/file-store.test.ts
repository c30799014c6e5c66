import { describe, expect, it } from 'vitest'
import { createMemoryFileStore, type FileStore, type StoredFile } from '../../../src/store/files.ts'

// The FileStore contract: every backend (memory now, a shared one later) must pass it.

function fileStoreContract(name: string, create: () => FileStore): void {
  const quota = { maxFiles: 3, maxBytes: 1000 }
  let n = 0
  const record = (accountId: string, over: Partial<StoredFile> = {}): StoredFile => ({
    id: `file-${++n}`,
    accountId,
    bytes: 100,
    createdAt: 1_700_000_000_000 + n * 1000,
    filename: `f${n}.txt`,
    purpose: 'user_data',
    contentType: 'text/plain',
    storageKey: `key${n}`,
    ...over,
  })

  const add = async (store: FileStore, file: StoredFile): Promise<StoredFile> => {
    const r = await store.reserve(file.accountId, quota, 0, 60_000)
    if (!r.ok) throw new Error(`reserve failed: ${r.reason}`)
    expect(await store.commit(r.token, file, quota, 0)).toBe(true)
    return file
  }

  describe(`FileStore contract: ${name}`, () => {
    it('gets, lists newest first, filters by purpose and deletes, per account only', async () => {
      const store = create()
      const a1 = await add(store, record('alice'))
      const a2 = await add(store, record('alice', { purpose: 'batch' }))
      const b1 = await add(store, record('bob'))

      expect(await store.get('alice', a1.id)).toEqual(a1)
      expect(await store.get('bob', a1.id)).toBeNull()
      expect((await store.list('alice', { limit: 100 })).files.map((f) => f.id)).toEqual([a2.id, a1.id])
      expect((await store.list('alice', { limit: 100, order: 'asc' })).files.map((f) => f.id)).toEqual([
        a1.id,
        a2.id,
      ])
      expect((await store.list('alice', { limit: 100, purpose: 'batch' })).files.map((f) => f.id)).toEqual([
        a2.id,
      ])
      expect((await store.list('bob', { limit: 100 })).files.map((f) => f.id)).toEqual([b1.id])

      expect(await store.delete('bob', a1.id)).toBeNull()
      expect(await store.delete('alice', a1.id)).toEqual(a1)
      expect(await store.delete('alice', a1.id)).toBeNull()
      expect(await store.get('alice', a1.id)).toBeNull()
      expect(await store.usage('alice')).toEqual({ files: 1, bytes: 100 })
    })

    it('pages with limit and after', async () => {
      const store = create()
      const big = { maxFiles: 100, maxBytes: 1e9 }
      const ids: string[] = []
      for (let i = 0; i < 5; i++) {
        const f = record('carol')
        const r = await store.reserve('carol', big, 0, 60_000)
        if (!r.ok) throw new Error('reserve')
        await store.commit(r.token, f, big, 0)
        ids.unshift(f.id)
      }
      const p1 = await store.list('carol', { limit: 2 })
      expect(p1.files.map((f) => f.id)).toEqual(ids.slice(0, 2))
      expect(p1.hasMore).toBe(true)
      const p3 = await store.list('carol', { limit: 2, after: ids[3] })
      expect(p3.files.map((f) => f.id)).toEqual(ids.slice(4))
      expect(p3.hasMore).toBe(false)
      expect((await store.list('carol', { limit: 2, after: 'file-unknown' })).files).toEqual([])
    })

    it('holds a slot per upload in progress, so parallel uploads cannot exceed the file count', async () => {
      const store = create()
      await add(store, record('dave'))
      const attempts = await Promise.all([1, 2, 3, 4].map(() => store.reserve('dave', quota, 0, 60_000)))
      expect(attempts.filter((r) => r.ok)).toHaveLength(2)
      expect(attempts.filter((r) => !r.ok)).toEqual([
        { ok: false, reason: 'files' },
        { ok: false, reason: 'files' },
      ])
      // A released slot is free again; another account is unaffected.
      const first = attempts[0]!
      if (!first.ok) throw new Error('expected a reservation')
      await store.release(first.token)
      expect((await store.reserve('dave', quota, 0, 60_000)).ok).toBe(true)
      expect((await store.reserve('erin', quota, 0, 60_000)).ok).toBe(true)
    })

    it('checks the byte quota atomically at commit', async () => {
      const store = create()
      const r1 = await store.reserve('frank', quota, 0, 60_000)
      const r2 = await store.reserve('frank', quota, 0, 60_000)
      if (!r1.ok || !r2.ok) throw new Error('reserve')
      expect(r1.bytesLeft).toBe(1000)
      // Both started with 1000 bytes left; only one 600-byte file fits.
      expect(await store.commit(r1.token, record('frank', { bytes: 600 }), quota, 0)).toBe(true)
      expect(await store.commit(r2.token, record('frank', { bytes: 600 }), quota, 0)).toBe(false)
      expect(await store.usage('frank')).toEqual({ files: 1, bytes: 600 })
      const r3 = await store.reserve('frank', quota, 0, 60_000)
      expect(r3.ok && r3.bytesLeft).toBe(400)
      if (r3.ok) await store.release(r3.token)
      // A full account is refused before any byte is read.
      await add(store, record('frank', { bytes: 400 }))
      expect(await store.reserve('frank', quota, 0, 60_000)).toEqual({ ok: false, reason: 'bytes' })
    })
  })
}

fileStoreContract('memory', createMemoryFileStore)

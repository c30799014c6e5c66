import { mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PassThrough, Readable } from 'node:stream'
import { afterAll, describe, expect, it } from 'vitest'
import { createLocalFileStorage } from '../../../src/files/local-storage.ts'
import { createLogger } from '../../../src/logger.ts'
import type { MediaOutput, OutputSource } from '../../../src/providers/async-media/types.ts'
import { createMemoryStore } from '../../../src/store/memory/index.ts'
import { createOutputKeeper } from '../../../src/predictions/outputs.ts'

// The output keeper streams each output to storage, takes a source's content type once it is opened,
// and leaves nothing behind when an output fails: what it wrote goes, what it did not open is
// discarded, no record is written.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

function keeperIn(maxBytes = 1024 * 1024) {
  const dir = mkdtempSync(join(tmpdir(), 'junction-keeper-'))
  dirs.push(dir)
  const store = createMemoryStore()
  const storage = createLocalFileStorage(dir)
  const keeper = createOutputKeeper({
    storage,
    outputs: store.outputs,
    tasks: store.tasks,
    now: () => 1_000,
    log: createLogger('silent'),
    retentionMs: 60_000,
    maxBytes,
  })
  return { dir, store, storage, keeper }
}

/** A source over `parts`, recording whether it was opened or discarded. */
function source(parts: (Buffer | Error)[], contentType?: string) {
  const seen = { opened: false, discarded: false }
  const src: OutputSource = {
    open() {
      seen.opened = true
      async function* gen(): AsyncGenerator<Buffer> {
        for (const p of parts) {
          if (p instanceof Error) throw p
          yield p
        }
      }
      return Promise.resolve({ stream: Readable.from(gen(), { objectMode: false }), contentType })
    },
    discard() {
      seen.discarded = true
      return Promise.resolve()
    },
  }
  return { src, seen }
}

const video = (data: MediaOutput['data']): MediaOutput => ({ type: 'video', contentType: 'video/mp4', data })

describe('output keeper', () => {
  it('stores bytes in hand and sources alike, with the content type a source learnt when opened', async () => {
    const { keeper, store, storage } = keeperIn()
    const a = source([Buffer.from('ab'), Buffer.from('cd')], 'image/webp')
    const refs = await keeper.keep('t1', 'acc', [
      { type: 'image', contentType: 'image/png', data: a.src },
      { type: 'image', contentType: 'image/png', data: Buffer.from('xyz') },
    ])
    expect(refs).toHaveLength(2)
    const first = await store.outputs.get(refs[0]!.id)
    expect(first).toMatchObject({ contentType: 'image/webp', bytes: 4, taskId: 't1', accountId: 'acc' })
    expect((await storage.read(first!.storageKey)).toString()).toBe('abcd')
    const second = await store.outputs.get(refs[1]!.id)
    expect(second).toMatchObject({ contentType: 'image/png', bytes: 3 })
  })

  it('a failing output removes the ones written before it and discards the ones after; no record, no file', async () => {
    const { keeper, dir, store } = keeperIn()
    const ok = source([Buffer.alloc(1000, 1)])
    const broken = source([Buffer.alloc(1000, 2), new Error('connection reset')])
    const later = source([Buffer.alloc(10, 3)])
    await expect(
      keeper.keep('t2', 'acc', [video(ok.src), video(broken.src), video(later.src)]),
    ).rejects.toThrow('connection reset')
    expect(ok.seen.opened).toBe(true)
    expect(later.seen).toEqual({ opened: false, discarded: true })
    expect(readdirSync(dir)).toEqual([])
    expect(await store.outputs.takeExpired(Number.MAX_SAFE_INTEGER, 10)).toEqual([])
  })

  it('an output past maxBytes fails with nothing kept, and its stream is not read to the end', async () => {
    const { keeper, dir } = keeperIn(64 * 1024)
    const stream = new PassThrough()
    let written = 0
    // Written as storage asks: once the limit is passed nothing more is read.
    const feed = async (): Promise<void> => {
      while (written < 10 * 1024 * 1024 && !stream.destroyed) {
        written += 16 * 1024
        if (!stream.write(Buffer.alloc(16 * 1024))) {
          await new Promise<void>((r) => {
            stream.once('drain', r)
            stream.once('close', r)
          })
        }
      }
    }
    const src: OutputSource = {
      open: () => Promise.resolve({ stream }),
      discard: () => Promise.resolve(),
    }
    const feeding = feed()
    await expect(keeper.keep('t3', 'acc', [video(src)])).rejects.toThrow('larger than 65536 bytes')
    await feeding
    expect(written).toBeLessThan(1024 * 1024)
    expect(readdirSync(dir)).toEqual([])
  })
})

import { randomBytes } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdir, open as openFile, readFile, readdir, rename, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { Transform, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { FileTooLargeError, StorageObjectNotFoundError, type FileStorage } from './storage.ts'

const keyPattern = /^[0-9a-f]{32}$/
const TEMP_PREFIX = '.tmp-'
/** A temp file untouched this long belongs to a crashed upload: an upload in progress keeps writing. */
const STALE_TEMP_MS = 60 * 60 * 1000

export interface LocalFileStorageOptions {
  now?: () => number
}

/**
 * Objects are files named by a random key in one directory. A write goes to a temp file in the same
 * directory (same file system, so the rename is atomic), is flushed to disk, then renamed to its key:
 * a crash leaves at most a temp file, never a half object under a key.
 */
export function createLocalFileStorage(dir: string, options: LocalFileStorageOptions = {}): FileStorage {
  const now = options.now ?? Date.now
  let ready: Promise<void> | undefined

  // Created on first use, so a gateway that never stores a file never creates the directory; and
  // again before every write (one cheap call), in case it was removed while the gateway runs.
  const ensureDir = async (): Promise<void> => {
    await mkdir(dir, { recursive: true, mode: 0o700 })
    ready ??= removeStaleTemps(dir, now()).then(
      () => undefined,
      (err: unknown) => {
        ready = undefined
        throw err
      },
    )
    await ready
  }

  const pathOf = (key: string): string => {
    // Keys come from our own metadata; checked anyway so nothing but a key can reach the file system.
    if (!keyPattern.test(key)) throw new StorageObjectNotFoundError(key)
    return join(dir, key)
  }

  return {
    async write(source: Readable, { maxBytes }) {
      await ensureDir()
      const key = randomBytes(16).toString('hex')
      const temp = join(dir, `${TEMP_PREFIX}${key}`)
      let bytes = 0
      const counter = new Transform({
        transform(chunk: Buffer, _encoding, callback) {
          bytes += chunk.length
          if (bytes > maxBytes) callback(new FileTooLargeError(maxBytes))
          else callback(null, chunk)
        },
      })
      try {
        // flush: fsync before close, so the renamed object is complete on disk.
        await pipeline(source, counter, createWriteStream(temp, { flags: 'wx', mode: 0o600, flush: true }))
        await rename(temp, join(dir, key))
      } catch (err) {
        await rm(temp, { force: true })
        throw err
      }
      return { key, bytes }
    },

    async open(key, range) {
      const path = pathOf(key)
      // The open handle keeps the bytes readable even if the object is removed meanwhile.
      const handle = await openFile(path, 'r').catch((err: unknown) => {
        throw notFound(err, key)
      })
      try {
        const { size } = await handle.stat()
        // A whole object is read up to its known last byte, not until a read finds the end: the stream
        // then ends as soon as its last bytes are written, before a client that read them all may close.
        const part = range?.(size) ?? (size > 0 ? { start: 0, end: size - 1 } : {})
        return { stream: handle.createReadStream(part), bytes: size }
      } catch (err) {
        await handle.close()
        throw err
      }
    },

    async read(key) {
      try {
        return await readFile(pathOf(key))
      } catch (err) {
        throw notFound(err, key)
      }
    },

    async remove(key) {
      await rm(pathOf(key), { force: true })
    },

    async list() {
      const out: { key: string; modifiedAt: number }[] = []
      for (const name of await namesIn(dir)) {
        if (!keyPattern.test(name)) continue
        const info = await stat(join(dir, name)).catch(() => null)
        if (info?.isFile()) out.push({ key: name, modifiedAt: info.mtimeMs })
      }
      return out
    },

    sweepTemps: () => removeStaleTemps(dir, now()),
  }
}

/** The directory's entries; none when it was never created. */
async function namesIn(dir: string): Promise<string[]> {
  return readdir(dir).catch((err: unknown) => {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return []
    throw err
  })
}

function notFound(err: unknown, key: string): unknown {
  return (err as NodeJS.ErrnoException).code === 'ENOENT' ? new StorageObjectNotFoundError(key) : err
}

async function removeStaleTemps(dir: string, now: number): Promise<number> {
  let removed = 0
  for (const name of await namesIn(dir)) {
    if (!name.startsWith(TEMP_PREFIX)) continue
    const path = join(dir, name)
    const info = await stat(path).catch(() => null)
    if (info && now - info.mtimeMs > STALE_TEMP_MS) {
      await rm(path, { force: true })
      removed++
    }
  }
  return removed
}

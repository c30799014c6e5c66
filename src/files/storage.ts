import type { Readable } from 'node:stream'

// Where uploaded bytes live. Metadata (owner, name, purpose) is in the FileStore; storage only knows
// opaque random keys, so no client-given name ever becomes a path.

export interface StoredObject {
  key: string
  bytes: number
}

export interface FileStorage {
  /**
   * Streams `source` into a new object and returns its key once it is complete and durable. Rejects
   * with FileTooLargeError as soon as more than `maxBytes` arrive; on any failure nothing is kept.
   */
  write(source: Readable, options: { maxBytes: number }): Promise<StoredObject>
  /**
   * The object's bytes as a stream (only `start`…`end`, inclusive, when `range` picks them, as `range`
   * is called with the object's size), and its whole size. Rejects with StorageObjectNotFoundError.
   */
  open(
    key: string,
    range?: (bytes: number) => { start: number; end: number } | undefined,
  ): Promise<{ stream: Readable; bytes: number }>
  /** The whole object in memory: only for bounded sizes (inlining into a chat request). */
  read(key: string): Promise<Buffer>
  /** Removes the object; a missing one is not an error. */
  remove(key: string): Promise<void>
  /** Every stored object (uploads in progress excluded) with its last write time, unix ms. */
  list(): Promise<{ key: string; modifiedAt: number }[]>
  /** Removes what uploads that died left behind (temp files untouched for an hour); returns how many. */
  sweepTemps(): Promise<number>
}

export class FileTooLargeError extends Error {
  readonly maxBytes: number
  constructor(maxBytes: number) {
    super(`file is larger than ${maxBytes} bytes`)
    this.name = 'FileTooLargeError'
    this.maxBytes = maxBytes
  }
}

export class StorageObjectNotFoundError extends Error {
  constructor(key: string) {
    super(`no stored object ${key}`)
    this.name = 'StorageObjectNotFoundError'
  }
}

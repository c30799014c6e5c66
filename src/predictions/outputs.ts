import { randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import type { Logger } from 'pino'
import type { FileStorage } from '../files/storage.ts'
import type { MediaOutput } from '../providers/async-media/types.ts'
import type { OutputStore, StoredOutput, TaskStore } from '../store/types.ts'
import type { TaskOutputRef } from '../domain/tasks.ts'

// Hosted outputs of predictions (docs/design/decisions.md, Predictions): the gateway keeps the bytes an upstream
// produced and hands out signed `GET /v1/outputs/{id}?expires=…&signature=…` URLs (their signing and
// checking are in auth/output-url.ts). An upstream's own URL (which may carry its credentials, or expire
// on the upstream's schedule) is never handed out.

/** `out_` + 24 url-safe characters (144 random bits). */
export function newOutputId(): string {
  return `out_${randomBytes(18).toString('base64url')}`
}

const EXTENSIONS: Record<string, string> = {
  'image/png': 'png',
  'image/jpeg': 'jpg',
  'image/webp': 'webp',
  'video/mp4': 'mp4',
  'audio/mpeg': 'mp3',
  'audio/wav': 'wav',
  'audio/ogg': 'ogg',
}

export function extensionFor(contentType: string): string {
  return EXTENSIONS[contentType] ?? 'bin'
}

export interface OutputKeeperDeps {
  storage: FileStorage
  outputs: OutputStore
  tasks: TaskStore
  now: () => number
  log: Logger
  /** Outputs are deleted this long after they were stored. */
  retentionMs: number
  /** Largest output accepted (the adapters bound what they read; this bounds what is written). */
  maxBytes: number
}

export interface OutputKeeper {
  /** Writes the outputs' bytes and records; returns their references for the task. */
  keep(taskId: string, accountId: string, outputs: readonly MediaOutput[]): Promise<TaskOutputRef[]>
  /**
   * Deletes expired outputs (records and bytes), then finished tasks older than `taskRetentionMs` (at
   * least the output retention); returns how many outputs went.
   */
  sweep(taskRetentionMs: number): Promise<number>
}

/** One output's bytes as a stream, and its content type (a source may know it only once opened). */
async function openOutput(out: MediaOutput): Promise<{ stream: Readable; contentType: string }> {
  if (Buffer.isBuffer(out.data)) {
    return { stream: Readable.from([out.data], { objectMode: false }), contentType: out.contentType }
  }
  const opened = await out.data.open()
  return { stream: opened.stream, contentType: opened.contentType ?? out.contentType }
}

export function createOutputKeeper(d: OutputKeeperDeps): OutputKeeper {
  const removeOutput = (o: StoredOutput): Promise<void> => d.storage.remove(o.storageKey)
  const forget = (key: string): Promise<void> =>
    d.storage.remove(key).catch((err: unknown) => d.log.warn({ err }, 'output removal failed'))
  return {
    async keep(taskId, accountId, outputs) {
      // Each output is streamed to storage as it comes (a download, an encoder), one at a time: the
      // bytes in memory are the stream buffers, whatever the output's size. Storage writes to a
      // temporary file and keeps nothing of a write that fails; when one output fails, the ones
      // already written go too and the ones not yet opened are discarded, so a failed step leaves no
      // file behind (the step is repeated later).
      const written: { out: MediaOutput; key: string; bytes: number; contentType: string }[] = []
      try {
        for (const out of outputs) {
          const opened = await openOutput(out)
          const stored = await d.storage.write(opened.stream, { maxBytes: d.maxBytes })
          written.push({ out, key: stored.key, bytes: stored.bytes, contentType: opened.contentType })
        }
      } catch (err) {
        await Promise.all(written.map((w) => forget(w.key)))
        await Promise.all(
          outputs
            .slice(written.length + 1)
            .map((o) => (Buffer.isBuffer(o.data) ? undefined : o.data.discard().catch(() => {}))),
        )
        throw err
      }
      const refs: TaskOutputRef[] = []
      for (const [i, w] of written.entries()) {
        const now = d.now()
        const record: StoredOutput = {
          id: newOutputId(),
          taskId,
          accountId,
          type: w.out.type,
          contentType: w.contentType,
          bytes: w.bytes,
          storageKey: w.key,
          createdAt: now,
          expiresAt: now + d.retentionMs,
        }
        try {
          await d.outputs.put(record)
        } catch (err) {
          // The bytes no record points at yet go; the recorded ones expire with their records.
          await Promise.all(written.slice(i).map((u) => forget(u.key)))
          throw err
        }
        refs.push({ id: record.id, type: w.out.type })
      }
      return refs
    },
    async sweep(taskRetentionMs) {
      const now = d.now()
      let removed = 0
      for (;;) {
        const expired = await d.outputs.takeExpired(now, 100)
        for (const o of expired) {
          await removeOutput(o).catch((err: unknown) =>
            d.log.warn({ err, output: o.id }, 'output removal failed'),
          )
        }
        removed += expired.length
        if (expired.length < 100) break
      }
      // Tasks are kept at least as long as their outputs (the caller's retention), so the outputs of a
      // swept task have expired and gone above.
      await d.tasks.sweep(now - taskRetentionMs)
      return removed
    },
  }
}

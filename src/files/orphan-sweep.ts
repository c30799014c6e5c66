import type { Logger } from '../logger.ts'
import type { FileStore } from '../store/types.ts'
import type { FileStorage } from './storage.ts'

// An upload writes its bytes first and its record second; a crash between the two leaves bytes no
// record points at. They are found by listing the stored objects and asking the store which keys it
// knows, and removed once they are older than a grace period: an upload still finishing (or a
// record committing on another instance sharing the directory) is never younger-than-grace garbage.

export interface OrphanSweepDeps {
  storage: FileStorage
  files: FileStore
  /** Bytes younger than this are left alone, recorded or not. */
  graceMs: number
  now: () => number
  log: Logger
}

/** Keys asked of the store at once. */
const BATCH = 500

/** Removes unrecorded objects older than the grace period, and dead uploads' temp files. */
export async function sweepOrphans(deps: OrphanSweepDeps): Promise<{ orphans: number; temps: number }> {
  const cutoff = deps.now() - deps.graceMs
  const old = (await deps.storage.list()).filter((o) => o.modifiedAt < cutoff).map((o) => o.key)
  let orphans = 0
  for (let i = 0; i < old.length; i += BATCH) {
    const batch = old.slice(i, i + BATCH)
    const recorded = await deps.files.existingKeys(batch)
    for (const key of batch) {
      if (recorded.has(key)) continue
      await deps.storage.remove(key)
      orphans++
    }
  }
  const temps = await deps.storage.sweepTemps()
  if (orphans + temps > 0) {
    deps.log.info({ orphans, temps }, 'removed file bytes that no record points at')
  }
  return { orphans, temps }
}

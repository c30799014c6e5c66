import type { Logger } from '../logger.ts'
import type { LedgerStore, ReservationRef } from '../store/types.ts'

// Keeps the reservations of running requests alive: one timer for all of them renews each every
// third of the TTL, so a request that runs longer than the TTL never loses its hold, and a process
// that dies stops renewing (its holds then expire).

export interface Renewals {
  /** Renews `reservation` until the returned function is called. */
  hold(reservation: ReservationRef): () => void
  /** How many reservations are being kept alive. */
  size(): number
}

export function createRenewals(deps: {
  ledger: LedgerStore
  now: () => number
  log: Logger
  ttlMs: number
}): Renewals {
  const held = new Set<ReservationRef>()
  let timer: ReturnType<typeof setInterval> | undefined
  const renewAll = (): void => {
    const now = deps.now()
    for (const r of held) {
      deps.ledger.renew(r, now, deps.ttlMs).then(
        (ok) => {
          if (!ok) deps.log.warn({ reservation: r.id }, 'reservation was gone when renewed')
        },
        (err: unknown) => deps.log.warn({ err, reservation: r.id }, 'could not renew a reservation'),
      )
    }
  }
  return {
    hold(reservation) {
      held.add(reservation)
      if (!timer) {
        timer = setInterval(renewAll, Math.max(1, Math.floor(deps.ttlMs / 3)))
        timer.unref()
      }
      return () => {
        held.delete(reservation)
        if (held.size === 0 && timer) {
          clearInterval(timer)
          timer = undefined
        }
      }
    },
    size: () => held.size,
  }
}

import { setImmediate as nextTurn } from 'node:timers/promises'

// Work proportional to a request's size (parsing a 10 MB body, walking 10 000 tool schemas, counting a
// prompt) is written once, as a generator that yields at checkpoints, every few thousand units of work.
// `finishNow` runs it to the end at once (tests, small inputs); `finishInTurns` lets the event loop run
// other requests whenever a turn has lasted TURN_MS, so no single request stalls the others.

/** Work that yields (nothing) where it may give the event loop a turn, and returns a T. */
export type Sliced<T> = Generator<void, T, void>

/** Longest stretch of sliced work between two turns of the event loop, plus one checkpoint's worth. */
export const TURN_MS = 4

export interface TurnOptions {
  /** Milliseconds, monotonic; tests pass a fake clock. */
  now?: () => number
  turnMs?: number
  /** Called at each turn given back to the event loop (tests count them). */
  onTurn?: () => void
}

/** Runs sliced work to the end without giving the event loop a turn. */
export function finishNow<T>(work: Sliced<T>): T {
  for (;;) {
    const step = work.next()
    if (step.done) return step.value
  }
}

/** Runs sliced work, giving the event loop a turn each time `turnMs` has passed since the last one. */
export async function finishInTurns<T>(work: Sliced<T>, options: TurnOptions = {}): Promise<T> {
  const now = options.now ?? (() => performance.now())
  const turnMs = options.turnMs ?? TURN_MS
  let turnStart = now()
  for (;;) {
    const step = work.next()
    if (step.done) return step.value
    if (now() - turnStart >= turnMs) {
      options.onTurn?.()
      await nextTurn()
      turnStart = now()
    }
  }
}

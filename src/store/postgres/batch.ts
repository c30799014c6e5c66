import { GatewayError } from '../../errors.ts'

// Group commit for the PostgreSQL store: calls of one kind (reserve, settle, rate-limit consume, …)
// made while earlier ones are on their way are queued and sent together, as one statement, so a busy
// gateway makes one round trip and one commit for many requests instead of one each.
//
// A batch leaves at the end of the current turn of the event loop (setImmediate), never later: a call
// made alone waits for nothing. While `maxInFlight` batches of the kind are out, new calls wait and
// join the next batch, so the batch grows with the load and the round trips do not. Every caller's
// promise settles only when its batch's statement has returned, that is committed. `batched` puts a
// store call's statement for one and its statement for many behind one batcher.

export interface BatcherOptions {
  /** Batches of this kind on their way at once (each holds one pool connection). */
  maxInFlight: number
  /** Most calls in one batch. */
  maxBatch: number
  /** Told the size of every batch sent (counters, tests). */
  onBatch?: (size: number) => void
}

/**
 * `run` gets the queued items and returns one settled result per item, in order (it may reject as a
 * whole: then every item of the batch is rejected with that error).
 */
export type BatchRunner<I, O> = (items: I[]) => Promise<PromiseSettledResult<O>[]>

export function createBatcher<I, O>(
  run: BatchRunner<I, O>,
  options: BatcherOptions,
): (item: I) => Promise<O> {
  interface Pending {
    item: I
    resolve: (value: O) => void
    reject: (err: unknown) => void
  }
  let queue: Pending[] = []
  let inFlight = 0
  let scheduled = false

  const schedule = (): void => {
    if (scheduled || queue.length === 0 || inFlight >= options.maxInFlight) return
    scheduled = true
    setImmediate(flush)
  }

  const flush = (): void => {
    scheduled = false
    if (queue.length === 0 || inFlight >= options.maxInFlight) return
    const batch = queue.slice(0, options.maxBatch)
    queue = queue.slice(batch.length)
    inFlight++
    options.onBatch?.(batch.length)
    run(batch.map((p) => p.item))
      .then(
        (results) => {
          batch.forEach((p, i) => {
            const r = results[i]
            if (r === undefined) p.reject(new Error('batch returned fewer results than items'))
            else if (r.status === 'fulfilled') p.resolve(r.value)
            else p.reject(r.reason)
          })
        },
        (err: unknown) => {
          for (const p of batch) p.reject(err)
        },
      )
      .finally(() => {
        inFlight--
        schedule()
      })
    schedule()
  }

  return (item) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ item, resolve, reject })
      schedule()
    })
}

/** Group commit settings; null: every call on its own. */
export type Batch = BatcherOptions | null

/**
 * `one` for a call alone, `many` for a batch of them. When `many` fails with anything but the
 * database being unavailable (an item it refuses, such as an unknown account), its transaction
 * committed nothing and each item is sent again on its own, so only that item fails.
 */
export function batched<I, O>(
  batch: Batch,
  one: (item: I) => Promise<O>,
  many: (items: I[]) => Promise<O[]>,
): (item: I) => Promise<O> {
  if (batch === null) return one
  return createBatcher<I, O>(async (items) => {
    if (items.length === 1) return Promise.allSettled([one(items[0]!)])
    try {
      return (await many(items)).map((value): PromiseFulfilledResult<O> => ({ status: 'fulfilled', value }))
    } catch (err) {
      if (err instanceof GatewayError) throw err
      return Promise.allSettled(items.map(one))
    }
  }, batch)
}

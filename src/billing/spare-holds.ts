import type { Logger } from '../logger.ts'
import type { Money } from '../domain/money.ts'
import type { LedgerStore, Reservation } from '../store/types.ts'
import { ids } from '../ids.ts'

// Holds taken ahead. A request's credit hold is a store call before its upstream call: one round trip
// (PostgreSQL) or one database-thread hop (SQLite) on the way to its first byte. For an account that is
// busy, this instance reserves a few holds ahead of need, in the background: real reservations in the
// store (each its own row, with the usual TTL), sized at the largest bound the account's requests asked
// for lately. A request whose hold fits one takes it here, in memory, and its settle charges and drops
// that row as it would its own. So nothing about the ledger changes: every request still holds, before
// its upstream call, a reservation the store made atomically against the balance; concurrent requests
// on any number of instances still cannot overdraw it together.
//
// What it costs: an account busy on an instance has up to `max` holds there that no request uses yet,
// never more than a quarter of what it had free when they were taken (`SHARE`); an instance keeps at most
// `maxTotal` (4 096) in all, however many accounts are busy. A request anywhere could be refused for
// credits while they wait; this instance gives its own back first (`giveBack`, before admission
// refuses), another instance's come back when it goes idle (`idleMs`), shuts down, or, if it died, when
// their TTL runs out, like its requests' own holds. A hold is larger than the request that
// takes it by at most the spread of the account's recent bounds; its settle drops it whole.
//
// Only requests with nothing else to count take one (metering.ts): no per-minute limit (its window must
// be counted in the same store call), no key limit or key hold. And only while the store answers: none
// is handed out once a second has passed without one of its answers (a store that stalled or went down
// would otherwise see requests served on holds whose charges it cannot take; the others get its 503).

/** What is held ahead never exceeds this share (1/SHARE) of what the account had free. */
const SHARE = 4n

export interface SpareHoldsOptions {
  /** The most holds kept ahead per account (0: none are). */
  max: number
  /** The most holds kept ahead by this instance, all accounts together (default 4 096). */
  maxTotal?: number
  /** An account without a request for this long gives back what it holds ahead. */
  idleMs: number
  /** The TTL of each hold (the reservations' TTL: renewed like any once a request takes it). */
  ttlMs: number
}

export interface SpareHolds {
  /**
   * A hold of at least `amount` for the account, taken ahead, as the request's reservation (its amount
   * the request's `amount`, what its charge is capped by); undefined when none is ready (hold as usual).
   * Either way the account's use is noted, and holds are taken ahead in the background when it is busy.
   */
  take(accountId: string, amount: Money, now: number): Reservation | undefined
  /**
   * A request of the account was settled or released: holds are taken ahead now if the stock is low
   * (while its answer is being finished, which does not wait for them).
   */
  ended(accountId: string, now: number): void
  /** Releases the account's holds taken ahead; true when there were any (the caller may try again). */
  giveBack(accountId: string): Promise<boolean>
  /** What the account's holds taken ahead and not used yet hold, in all. */
  heldFor(accountId: string): Money
  /** Every account's holds taken ahead and not used yet: how many, and what they hold. */
  totals(): { holds: number; amount: Money }
  /** Resolves once no call of its own to the store is out (tests). */
  idle(): Promise<void>
  /** Releases every hold taken ahead and stops taking more. */
  close(): Promise<void>
}

interface AccountSpares {
  stock: Reservation[]
  /** How many to keep: doubles when a request found none, up to `max`. */
  target: number
  /** The largest amount asked since the last refill: the next holds are this large. */
  largest: Money
  /** The size of the holds taken ahead last. */
  size: Money
  /** What the account had free when last read (less the holds taken ahead since); undefined: unread. */
  free: Money | undefined
  /** When `free` was read (or asked for). */
  freeAt: number
  lastSeen: number
  refilling: boolean
  /** No refill before this time (after a failure, or when the balance did not allow any). */
  pausedUntil: number
  /** Counts the give-backs: holds a refill took before the last one are released, not kept. */
  generation: number
}

/** A request within this long of the one before makes its account busy: holds are taken ahead. */
const BUSY_MS = 1_000
/** After a refill that failed or found too little free. */
const PAUSE_MS = 1_000
/** How long a balance read guides the refills. */
const FREE_READ_MS = 1_000
/** Holds are handed out only within this long of the store's last answer. */
const ANSWERED_MS = 1_000
/** SpareHoldsOptions.maxTotal by default: however many accounts are busy, the store keeps this many at most. */
const MAX_TOTAL = 4_096

export function createSpareHolds(
  deps: { ledger: LedgerStore; log: Logger; now: () => number },
  options: SpareHoldsOptions,
): SpareHolds {
  return new Spares(deps, options)
}

class Spares implements SpareHolds {
  readonly #accounts = new Map<string, AccountSpares>()
  readonly #pending = new Set<Promise<unknown>>()
  readonly #timer: NodeJS.Timeout | undefined
  #closed = false
  /** When the store last answered a call of this module's or a settle (ended). */
  #answeredAt = Number.NEGATIVE_INFINITY
  /** Holds in every account's stock, and asked for by refills on their way (`maxTotal` bounds both). */
  #inStock = 0
  #asked = 0

  readonly deps: { ledger: LedgerStore; log: Logger; now: () => number }
  readonly options: SpareHoldsOptions

  constructor(deps: { ledger: LedgerStore; log: Logger; now: () => number }, options: SpareHoldsOptions) {
    this.deps = deps
    this.options = options
    if (options.max > 0) {
      this.#timer = setInterval(() => this.#dropIdle(), Math.max(1, Math.floor(options.idleMs / 2)))
      this.#timer.unref()
    }
  }

  take(accountId: string, amount: Money, now: number): Reservation | undefined {
    if (this.#closed || this.options.max <= 0) return undefined
    let a = this.#accounts.get(accountId)
    if (!a) {
      a = {
        stock: [],
        target: 0,
        largest: 0n,
        size: 0n,
        free: undefined,
        freeAt: 0,
        lastSeen: Number.NEGATIVE_INFINITY,
        refilling: false,
        pausedUntil: 0,
        generation: 0,
      }
      this.#accounts.set(accountId, a)
    }
    const busy = now - a.lastSeen < BUSY_MS
    a.lastSeen = now
    if (amount > a.largest) a.largest = amount
    if (now - this.#answeredAt <= ANSWERED_MS) {
      // Newest first. A request's renewals come every third of the TTL: a hold with less than two
      // thirds of it left is released rather than handed out.
      for (let i = a.stock.length - 1; i >= 0; i--) {
        const r = a.stock[i]!
        const fresh = r.expiresAt - now > (this.options.ttlMs * 2) / 3
        if (fresh && r.amount < amount) continue
        a.stock.splice(i, 1)
        this.#inStock--
        if (fresh) return { id: r.id, accountId, amount, expiresAt: r.expiresAt }
        this.#release([r])
      }
    }
    // None ready: the request holds on its own, and the refill goes with that hold.
    if (busy) {
      if (a.target < this.options.max) a.target = Math.min(this.options.max, Math.max(2, a.target * 2))
      this.#refill(accountId, a, now)
    }
    return undefined
  }

  ended(accountId: string, now: number): void {
    this.#answeredAt = this.deps.now()
    const a = this.#accounts.get(accountId)
    if (a && a.stock.length * 2 <= a.target) this.#refill(accountId, a, now)
  }

  async giveBack(accountId: string): Promise<boolean> {
    const a = this.#accounts.get(accountId)
    if (!a) return false
    a.target = 0
    a.generation++
    a.pausedUntil = this.deps.now() + PAUSE_MS
    const stock = a.stock.splice(0)
    this.#inStock -= stock.length
    if (stock.length === 0) return false
    await this.#release(stock)
    return true
  }

  heldFor(accountId: string): Money {
    return (this.#accounts.get(accountId)?.stock ?? []).reduce((sum, r) => sum + r.amount, 0n)
  }

  totals(): { holds: number; amount: Money } {
    let holds = 0
    let amount = 0n
    for (const a of this.#accounts.values()) {
      holds += a.stock.length
      for (const r of a.stock) amount += r.amount
    }
    return { holds, amount }
  }

  async idle(): Promise<void> {
    while (this.#pending.size > 0) await Promise.all(this.#pending)
  }

  async close(): Promise<void> {
    this.#closed = true
    if (this.#timer) clearInterval(this.#timer)
    await this.idle()
    const all = [...this.#accounts.values()].flatMap((a) => a.stock.splice(0))
    this.#accounts.clear()
    this.#inStock = 0
    await this.#release(all)
  }

  /** Counted until settled (`idle`, `close`); the callers' promises never reject. */
  #track<T>(p: Promise<T>): Promise<T> {
    this.#pending.add(p)
    const done = (): void => void this.#pending.delete(p)
    p.then(done, done)
    return p
  }

  #release(held: readonly Reservation[]): Promise<unknown> {
    const { ledger, log } = this.deps
    return this.#track(
      Promise.all(
        held.map((r) =>
          ledger
            .release(r)
            .catch((err: unknown) => log.warn({ err, reservation: r.id }, 'could not release a spare hold')),
        ),
      ),
    )
  }

  /** Reads what the account has free, in the background; the next refills go by it. */
  #readFree(accountId: string, a: AccountSpares, now: number): void {
    a.freeAt = now
    void this.#track(
      this.deps.ledger.credits(accountId, now).then(
        (c) => {
          this.#answeredAt = this.deps.now()
          a.free = c.totalCredits - c.totalUsage - c.reserved
        },
        (err: unknown) => {
          a.pausedUntil = this.deps.now() + PAUSE_MS
          this.deps.log.warn({ err, accountId }, 'could not read a balance to hold ahead')
        },
      ),
    )
  }

  /**
   * Takes holds ahead up to the target, by what the account had free when last read. Called when no
   * request waits for it: with a request's own hold (the calls join its batch, SQLite, or go out with
   * it, PostgreSQL), or once a settle was committed.
   */
  #refill(accountId: string, a: AccountSpares, now: number): void {
    if (this.#closed || a.refilling || now < a.pausedUntil || a.target === 0) return
    if (a.free === undefined || now - a.freeAt >= FREE_READ_MS) this.#readFree(accountId, a, now)
    if (a.free === undefined) return
    if (a.largest > 0n) a.size = a.largest
    a.largest = 0n
    const size = a.size
    if (size <= 0n) return
    const room = a.free / (SHARE * size) - BigInt(a.stock.length)
    const want = BigInt(a.target - a.stock.length)
    const n = Math.min(
      Number(room < want ? room : want),
      (this.options.maxTotal ?? MAX_TOTAL) - this.#inStock - this.#asked,
    )
    if (n <= 0) return
    a.free -= BigInt(n) * size
    a.refilling = true
    this.#asked += n
    const generation = a.generation
    const { ledger, log } = this.deps
    void this.#track(
      Promise.all(
        Array.from({ length: n }, () =>
          ledger.reserve(accountId, `spare-${ids.request()}`, size, now, this.options.ttlMs),
        ),
      )
        .then(async (taken) => {
          this.#answeredAt = this.deps.now()
          const unused: Reservation[] = []
          for (const r of taken) {
            if (r === null) continue
            // Less than asked (the balance moved meanwhile), or given back since: of no use ahead.
            const kept =
              r.amount >= size &&
              !this.#closed &&
              this.#accounts.get(accountId) === a &&
              a.generation === generation
            if (kept) {
              a.stock.push(r)
              this.#inStock++
            } else unused.push(r)
          }
          if (unused.length > 0 || taken.includes(null)) {
            a.pausedUntil = this.deps.now() + PAUSE_MS
            a.free = undefined
            await this.#release(unused)
          }
        })
        .catch((err: unknown) => {
          a.pausedUntil = this.deps.now() + PAUSE_MS
          log.warn({ err, accountId }, 'could not take holds ahead')
        })
        .finally(() => {
          a.refilling = false
          this.#asked -= n
        }),
    )
  }

  #dropIdle(): void {
    const now = this.deps.now()
    for (const [accountId, a] of this.#accounts) {
      if (now - a.lastSeen < this.options.idleMs || a.refilling) continue
      this.#accounts.delete(accountId)
      this.#inStock -= a.stock.length
      if (a.stock.length > 0) void this.#release(a.stock)
    }
  }
}

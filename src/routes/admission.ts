import type { FastifyReply, FastifyRequest } from 'fastify'
import { admitRequest } from '../billing/metering.ts'
import type { Deps } from '../deps.ts'
import { shareExceeded } from '../http/json-body.ts'
import type { AttemptRecord } from '../domain/records.ts'
import type { PreAdmission } from '../inference/generation.ts'

// What the inference routes check before a request's body is read: the key and account (app.ts), then
// the account's share of the body budget, the requests-per-minute limit and a balance above zero. A
// refused request's body is never read, so a key with nothing left cannot hold body bytes others need
// (the answer closes the connection, app.ts). A body already received whole is left to the route's
// own admission, which checks the same in the store call of its hold (`deferWhenReceived`).

export interface BeforeBodyOptions {
  /**
   * Whether the balance is checked before the body (default yes). The route's own admission checks it
   * again with the exact hold; a request that may need no new hold (an Idempotency-Key repeat, which
   * returns its first task) is let through to it.
   */
  checkCredits?: (request: FastifyRequest) => boolean
  /**
   * The route's own admission (the hold) also counts the request and checks the balance, in the same
   * store call (`admit` without `requestCounted`). When the whole body arrived with the headers, there
   * is nothing left to refuse early, so the check is left to it: one store call a request instead of
   * two. The route then calls `request.junction.deferredAdmission.run()` before any work beyond the
   * request itself (reading files, stored conversations), and `supersede()` when its admission counts
   * the request (beginGeneration does both); an error answered before either runs the check first
   * (sendAfterDeferredAdmission), so a refused request is answered 429/402 and counted as before.
   */
  deferWhenReceived?: boolean
}

/** A route `onRequest` hook: 429/402 before the body; the request then counts once (`requestCounted`). */
export function admitBeforeBody(deps: Deps, options: BeforeBodyOptions = {}) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    // An account already holding its share of the body budget would be refused at its first byte.
    const budget = request.server.bodyBudget
    if (budget.heldBy(request.account.id) >= budget.perAccountBytes) throw shareExceeded(budget)
    const check = async (): Promise<void> => {
      const admission = await admitRequest(
        deps,
        request.account,
        deps.now(),
        { credits: options.checkCredits?.(request) ?? true },
        request.apiKey,
      )
      reply.headers(admission.headers)
      request.junction.requestCounted = true
    }
    if (options.deferWhenReceived === true) {
      // Node's parser hands over the bytes of one read together: a body sent with its headers is
      // buffered once the read's synchronous work is done, which this microtask waits for.
      await null
      if (bodyReceived(request)) {
        request.junction.deferredAdmission = new DeferredAdmission(check)
        return
      }
    }
    await check()
  }
}

/** Whether the whole body is buffered already (nothing of it is read yet: the route has not begun). */
function bodyReceived(request: FastifyRequest): boolean {
  const raw = request.raw
  if (raw.complete) return true
  const header = request.headers['content-length']
  if (header === undefined || !/^\d{1,15}$/.test(header)) return false
  return raw.readableLength >= Number(header)
}

/**
 * A class, not an object literal with a getter: V8 keeps what such a literal's own getter holds alive
 * through every young-generation collection until a full one. Here that was the whole request (the
 * check's context), so each request was copied into the old generation: 4-12 KB of it, scavenges of
 * 15-20 ms, a tenth of the blocking requests a second (docs/benchmarks.md, eleventh round).
 */
export class DeferredAdmission implements PreAdmission {
  readonly #check: () => Promise<void>
  #ran: Promise<void> | undefined
  #superseded = false
  constructor(check: () => Promise<void>) {
    this.#check = check
  }
  run(): Promise<void> {
    this.#ran ??= this.#check()
    return this.#ran
  }
  supersede(): void {
    this.#superseded = true
  }
  get done(): boolean {
    return this.#superseded || this.#ran !== undefined
  }
}

/**
 * An error handler's send, for a request whose pre-body admission was deferred and has not run: it
 * runs first, so that a request refused by it is answered with its 429 or 402 (and counted), as it
 * would have been before its body was read; otherwise the error is sent as it is.
 */
export function sendAfterDeferredAdmission<T>(
  request: FastifyRequest,
  err: unknown,
  send: (err: unknown) => T,
): T | Promise<T> {
  const pending = request.junction.deferredAdmission
  if (pending === undefined || pending.done) return send(err)
  return pending.run().then(
    () => send(err),
    (refusal: unknown) => send(refusal),
  )
}

/** Which deployment was tried last, and how many calls were made: on error answers too. */
export function attemptHeaders(attempts: readonly AttemptRecord[]): Record<string, string> {
  const last = attempts.at(-1)
  if (last === undefined) return {}
  return {
    'x-junction-provider': last.provider,
    'x-junction-deployment': last.deployment,
    'x-junction-attempts': String(attempts.length),
  }
}

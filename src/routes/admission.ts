import type { FastifyReply, FastifyRequest } from 'fastify'
import { admitRequest } from '../billing/metering.ts'
import type { Deps } from '../deps.ts'
import { shareExceeded } from '../http/json-body.ts'
import type { AttemptRecord } from '../domain/records.ts'

// What the inference routes check before a request's body is read: the key and account (app.ts), then
// the account's share of the body budget, the requests-per-minute limit and a balance above zero. A refused request's body is never read, so
// a key with nothing left cannot hold body bytes others need (the answer closes the connection, app.ts).

export interface BeforeBodyOptions {
  /**
   * Whether the balance is checked before the body (default yes). The route's own admission checks it
   * again with the exact hold; a request that may need no new hold (an Idempotency-Key repeat, which
   * returns its first task) is let through to it.
   */
  checkCredits?: (request: FastifyRequest) => boolean
}

/** A route `onRequest` hook: 429/402 before the body; the request then counts once (`requestCounted`). */
export function admitBeforeBody(deps: Deps, options: BeforeBodyOptions = {}) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    // An account already holding its share of the body budget would be refused at its first byte.
    const budget = request.server.bodyBudget
    if (budget.heldBy(request.account.id) >= budget.perAccountBytes) throw shareExceeded(budget)
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

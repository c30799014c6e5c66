import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { z } from 'zod'
import { SESSION_COOKIE, type ConsoleSessions, type SessionClaims } from '../auth/index.ts'
import type { Deps } from '../deps.ts'
import { fromZodError, GatewayError } from '../errors.ts'
import type { ConsoleAssets } from './assets.ts'
import type { Account, ApiKeyRecord } from '../domain/accounts.ts'

// GET /console (the page), its assets, and the session: POST signs in with a key, GET tells who is
// signed in (and hands the page its CSRF token again after a reload), DELETE signs out.

// No length bound here: an over-long key gets the same refusal as any wrong one (the body limit bounds it).
const signInBody = z.object({ key: z.string() }).strict()

/** The Content-Security-Policy of the page: its own origin only, no inline script or style. */
export function consolePolicy(outputsOrigin: string | undefined): string {
  const media = outputsOrigin === undefined ? "'self'" : `'self' ${outputsOrigin}`
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src ${media} data: blob:`,
    `media-src ${media} blob:`,
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ')
}

export const consoleRoutes: FastifyPluginAsync<{
  deps: Deps
  assets: ConsoleAssets
  sessions: ConsoleSessions
}> = async (app, { deps, assets, sessions }) => {
  const publicUrl = deps.config.predictions.publicUrl
  const policy = consolePolicy(publicUrl === undefined ? undefined : new URL(publicUrl).origin)
  const ttlSeconds = Math.floor(deps.config.console.sessionTtlMs / 1000)
  const secure = (request: FastifyRequest) =>
    request.protocol === 'https' || publicUrl?.startsWith('https:') === true

  const setCookie = (request: FastifyRequest, reply: FastifyReply, value: string, maxAge: number) => {
    const attributes = [
      `${SESSION_COOKIE}=${value}`,
      'Path=/',
      `Max-Age=${maxAge}`,
      'HttpOnly',
      'SameSite=Strict',
    ]
    if (secure(request)) attributes.push('Secure')
    reply.header('set-cookie', attributes.join('; '))
  }
  const sessionBody = (claims: SessionClaims, account: Account | null, key: ApiKeyRecord | null) => ({
    object: 'console_session',
    role: claims.role,
    account: account ? { id: account.id, name: account.name } : null,
    // A management key's session manages the account's keys; an inference key's reads them.
    management: key?.management === true,
    admin_api: deps.config.adminKey !== undefined,
    csrf_token: sessions.csrf(claims),
    expires_at: Math.floor(claims.exp / 1000),
  })

  app.addHook('onSend', async (_request, reply) => {
    reply.header('x-content-type-options', 'nosniff')
    reply.header('referrer-policy', 'no-referrer')
  })

  app.get('/console', async (_request, reply) => {
    return reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('content-security-policy', policy)
      .header('x-frame-options', 'DENY')
      .send(assets.html)
  })

  app.get<{ Params: { version: string; '*': string } }>(
    '/console/assets/:version/*',
    async (request, reply) => {
      const asset =
        request.params.version === assets.version ? assets.files.get(request.params['*']) : undefined
      if (!asset) throw new GatewayError('route_not_found', `no console asset ${request.url.split('?')[0]}`)
      const gzip = asset.gzip !== undefined && /\bgzip\b/.test(request.headers['accept-encoding'] ?? '')
      reply
        .header('content-type', asset.type)
        .header('cache-control', 'public, max-age=31536000, immutable')
        .header('vary', 'accept-encoding')
      if (gzip) reply.header('content-encoding', 'gzip')
      return reply.send(gzip ? asset.gzip : asset.body)
    },
  )

  app.post('/console/session', async (request, reply) => {
    const parsed = signInBody.safeParse(request.body ?? {}, { reportInput: false })
    if (!parsed.success) throw fromZodError(parsed.error)
    const { token, claims, account, key } = await sessions.signIn(parsed.data.key.trim(), request.ip)
    setCookie(request, reply, token, ttlSeconds)
    return reply.header('cache-control', 'no-store').send(sessionBody(claims, account, key))
  })

  app.get('/console/session', async (request, reply) => {
    const found = await sessions.fromRequest(request)
    if (!found) throw new GatewayError('invalid_session', 'not signed in')
    return reply.header('cache-control', 'no-store').send(sessionBody(found.claims, found.account, found.key))
  })

  app.delete('/console/session', async (request, reply) => {
    let found: Awaited<ReturnType<ConsoleSessions['fromRequest']>> = null
    try {
      found = await sessions.fromRequest(request)
    } catch (err) {
      // A forged CSRF token is refused; a session already expired or revoked is simply cleared.
      if (!(err instanceof GatewayError) || err.code === 'invalid_csrf_token') throw err
    }
    if (found) await sessions.revoke(found.claims)
    setCookie(request, reply, '', 0)
    return { object: 'console_session', signed_out: true }
  })
}

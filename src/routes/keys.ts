import type { FastifyPluginAsync } from 'fastify'
import { z } from 'zod'
import type { Deps } from '../deps.ts'
import { fromZodError } from '../errors.ts'
import { createKeyService } from '../keys/service.ts'
import { createKeyBody, toCurrentKeyBody, toKeyBody, toKeyPatch, updateKeyBody } from '../schemas/keys.ts'

// The account's own key API, in OpenRouter's shapes and on its paths under /v1: the calling key
// (any key), and the account's keys (a management key of the account only; another account's key is
// 404, as a missing one).

const KEYS_PAGE = 100

const listQuery = z.object({
  offset: z.coerce.number().int().min(0).max(1_000_000).default(0),
  limit: z.coerce.number().int().min(1).max(KEYS_PAGE).default(KEYS_PAGE),
  include_disabled: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
})
const hashParams = z.object({ hash: z.string().regex(/^[0-9a-f]{64}$/, 'a key hash: 64 hex characters') })

/** No body at all is `{}`; any other JSON that is not an object is a 400. */
function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value === undefined ? {} : value, { reportInput: true })
  if (!r.success) throw fromZodError(r.error)
  return r.data
}

export const keysRoutes: FastifyPluginAsync<{ deps: Deps }> = async (app, { deps }) => {
  const keys = createKeyService(deps.store, deps.now)
  const management = { config: { keys: 'management' as const } }

  app.get('/v1/key', { config: { keys: 'any' } }, async (request) => {
    const usage = await keys.usage(request.account.id, request.apiKey)
    return {
      data: toCurrentKeyBody(
        request.apiKey,
        usage,
        request.account,
        deps.config.limits.defaultRateLimits.requestsPerMinute,
      ),
    }
  })

  app.get('/v1/keys', management, async (request) => {
    const q = parse(listQuery, request.query)
    const page = await keys.list(request.account.id, {
      offset: q.offset,
      limit: q.limit,
      includeDisabled: q.include_disabled,
    })
    return { data: page.map((k) => toKeyBody(k.key, k.usage)) }
  })

  app.post('/v1/keys', management, async (request, reply) => {
    const body = parse(createKeyBody, request.body)
    const { secret, key } = await keys.issue(request.account.id, body)
    // The only time the key is shown: only its hash is kept.
    return reply.code(201).send({ data: toKeyBody(key.key, key.usage), key: secret })
  })

  app.get('/v1/keys/:hash', management, async (request) => {
    const { hash } = parse(hashParams, request.params)
    const k = await keys.get(request.account.id, hash)
    return { data: toKeyBody(k.key, k.usage) }
  })

  app.patch('/v1/keys/:hash', management, async (request) => {
    const { hash } = parse(hashParams, request.params)
    const patch = toKeyPatch(parse(updateKeyBody, request.body))
    const k = await keys.update(request.account.id, hash, patch)
    return { data: toKeyBody(k.key, k.usage) }
  })

  app.delete('/v1/keys/:hash', management, async (request) => {
    const { hash } = parse(hashParams, request.params)
    await keys.remove(request.account.id, hash)
    return { deleted: true }
  })
}

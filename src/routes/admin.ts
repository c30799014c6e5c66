import { randomBytes } from 'node:crypto'
import { requireOperator } from '../auth/index.ts'
import { createKeyService, type KeyService } from '../keys/service.ts'
import { toAdminAccountBody } from '../schemas/accounts.ts'
import { adminCreateKeyBody, noticesBody, toKeyBody, toNoticesBody } from '../schemas/keys.ts'
import { setNotices } from '../keys/notices.ts'
import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify'
import { z } from 'zod'
import { discountRateSchema as rate, overdraftSchema, toHeldCreditsBody } from '../schemas/billing.ts'
import { parseQuery } from '../schemas/query.ts'
import { toGenerationBody } from '../schemas/generation.ts'
import { toPpm, usd, usdRounded } from '../billing/money.ts'
import type { Deps } from '../deps.ts'
import { fromZodError, GatewayError } from '../errors.ts'
import type { Store } from '../store/types.ts'
import type { Account } from '../domain/accounts.ts'
import { isWebhookSecret } from '../predictions/webhook-signing.ts'

// The operator's API: accounts, keys, credits, discounts, rate limits and generations, changed
// while the gateway runs. Protected by GATEWAY_ADMIN_KEY and absent when that is unset.

export const rateLimitsBody = z
  .object({
    requests_per_minute: z.number().int().positive().nullable().optional(),
    tokens_per_minute: z.number().int().positive().nullable().optional(),
  })
  .strict()

export const createAccountBody = z
  .object({
    id: z
      .string()
      .regex(/^[A-Za-z0-9_.-]{1,64}$/)
      .optional(),
    name: z.string().min(1).max(200).optional(),
    // Rounded to the picodollar (1e-12 USD), as `amount` of the credits route.
    credits: z.number().min(0).max(1e9).transform(usdRounded).optional(),
    discount_percent: rate.optional(),
    rate_limits: rateLimitsBody.optional(),
    overdraft_usd: overdraftSchema.optional(),
  })
  .strict()
export const overdraftBody = z.object({ overdraft_usd: overdraftSchema }).strict()

export const creditsBody = z
  .object({
    // Credits are only added: a negative amount would let an operator's typo take an account below zero.
    // Rounded to the picodollar (1e-12 USD), the ledger's unit: an amount that rounds to zero is refused.
    amount: z
      .number()
      .max(1e9)
      .transform(usdRounded)
      .refine((m) => m > 0n, 'must be at least one picodollar, 1e-12 (credits are only added)'),
  })
  .strict()
export const webhookSecretBody = z
  .object({
    secret: z
      .string()
      .refine(isWebhookSecret, 'must be whsec_ followed by base64 of 24 to 64 bytes')
      .optional(),
  })
  .strict()

export const discountBody = z
  .object({ discount_percent: rate.nullable(), model: z.string().min(1).optional() })
  .strict()
export const pageQuery = z.object({
  limit: z.coerce.number().int().min(1).max(500).default(50),
  before: z.string().min(1).max(200).optional(),
  /** Only the records made with this key (its hash). */
  key: z
    .string()
    .regex(/^[0-9a-f]{64}$/, 'a key hash: 64 hex characters')
    .optional(),
})

/** No body at all is `{}`; any other JSON that is not an object (`null`, `[]`, `1`) is a 400. */
function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value === undefined ? {} : value, { reportInput: true })
  if (!r.success) throw fromZodError(r.error)
  return r.data
}

/** What every admin route group uses: the deps, the key service, an account's view and its lookup. */
interface AdminContext {
  deps: Deps
  store: Store
  keys: KeyService
  /** The admin API's body of an account: its settings, limits in force and credits. */
  accountView: (a: Account) => Promise<ReturnType<typeof toAdminAccountBody>>
  /** The account, or 404 `account_not_found`. */
  mustGet: (id: string) => Promise<Account>
}

function createAdminContext(deps: Deps): AdminContext {
  const store = deps.store
  const defaults = deps.config.limits.defaultRateLimits
  return {
    deps,
    store,
    keys: createKeyService(store, deps.now),
    accountView: async (a) => toAdminAccountBody(a, await store.ledger.credits(a.id, deps.now()), defaults),
    mustGet: async (id) => {
      const a = await store.accounts.get(id)
      if (!a) throw new GatewayError('account_not_found', `account ${id} not found`)
      return a
    },
  }
}

/** POST /admin/accounts, GET /admin/accounts and GET /admin/accounts/:id. */
function registerAccountRoutes(
  app: FastifyInstance,
  { deps, store, accountView, mustGet }: AdminContext,
): void {
  app.post('/admin/accounts', async (request, reply) => {
    const body = parse(createAccountBody, request.body)
    const account: Account = {
      id: body.id ?? `acct_${randomBytes(12).toString('hex')}`,
      name: body.name ?? body.id ?? 'account',
      createdAt: deps.now(),
      discountPpm: toPpm(body.discount_percent ?? 0),
      modelDiscountsPpm: {},
      rateLimits: {
        requestsPerMinute: body.rate_limits?.requests_per_minute ?? undefined,
        tokensPerMinute: body.rate_limits?.tokens_per_minute ?? undefined,
      },
      ...(body.overdraft_usd ? { overdraft: usd(body.overdraft_usd) } : {}),
    }
    if (!(await store.accounts.create(account, body.credits ?? 0n))) {
      throw new GatewayError('account_exists', `account ${account.id} already exists`, {
        param: 'id',
      })
    }
    return reply.code(201).send(await accountView(account))
  })

  app.get('/admin/accounts', async () => ({
    object: 'list',
    data: await Promise.all((await store.accounts.list()).map(accountView)),
  }))

  app.get<{ Params: { id: string } }>('/admin/accounts/:id', async (request) =>
    accountView(await mustGet(request.params.id)),
  )
}

/** An account's keys: issue (the key shown once), list with their usage, delete. */
function registerAccountKeyRoutes(app: FastifyInstance, { store, keys, mustGet }: AdminContext): void {
  // The same body as the account's own POST /v1/keys, and `management`: how an operator hands an
  // account its first management key.
  app.post<{ Params: { id: string } }>('/admin/accounts/:id/keys', async (request, reply) => {
    const account = await mustGet(request.params.id)
    const body = parse(adminCreateKeyBody, request.body)
    const { secret, key } = await keys.issue(account.id, body)
    // The only time the key is shown: only its hash is kept.
    return reply.code(201).send({
      id: key.key.id,
      object: 'api_key',
      key: secret,
      hash: key.key.hash,
      prefix: key.key.prefix,
      created_at: Math.floor(key.key.createdAt / 1000),
      data: toKeyBody(key.key, key.usage),
    })
  })

  app.get<{ Params: { id: string } }>('/admin/accounts/:id/keys', async (request) => {
    const account = await mustGet(request.params.id)
    const list = await keys.list(account.id, {
      offset: 0,
      limit: Number.MAX_SAFE_INTEGER,
      includeDisabled: true,
    })
    return {
      object: 'list',
      // The key API's fields, then the admin API's own (created_at in Unix seconds, as elsewhere here).
      data: list.map((k) => ({
        ...toKeyBody(k.key, k.usage),
        id: k.key.id,
        object: 'api_key',
        // Keys given to the config file as SHA-256 have no known prefix.
        prefix: k.key.prefix === '' ? null : k.key.prefix,
        created_at: Math.floor(k.key.createdAt / 1000),
      })),
    }
  })

  app.delete<{ Params: { id: string; keyId: string } }>(
    '/admin/accounts/:id/keys/:keyId',
    async (request) => {
      const account = await mustGet(request.params.id)
      if (!(await store.accounts.removeKey(account.id, request.params.keyId))) {
        throw new GatewayError('key_not_found', `key ${request.params.keyId} not found`)
      }
      return { id: request.params.keyId, object: 'api_key', deleted: true }
    },
  )
}

/** An account's settings: credits (only added), discounts, rate limits, overdraft, notices. */
function registerAccountSettingsRoutes(
  app: FastifyInstance,
  { deps, store, accountView, mustGet }: AdminContext,
): void {
  app.post<{ Params: { id: string } }>('/admin/accounts/:id/credits', async (request) => {
    const account = await mustGet(request.params.id)
    const { amount } = parse(creditsBody, request.body)
    await store.ledger.addCredits(account.id, amount, deps.now())
    return toHeldCreditsBody(await store.ledger.credits(account.id, deps.now()))
  })

  app.put<{ Params: { id: string } }>('/admin/accounts/:id/discount', async (request) => {
    const account = await mustGet(request.params.id)
    const body = parse(discountBody, request.body)
    const ppm = body.discount_percent === null ? null : toPpm(body.discount_percent)
    let patch: Partial<Account>
    if (body.model === undefined) patch = { discountPpm: ppm ?? 0 }
    else {
      const modelDiscountsPpm = { ...account.modelDiscountsPpm }
      if (ppm === null) delete modelDiscountsPpm[body.model]
      else modelDiscountsPpm[body.model] = ppm
      patch = { modelDiscountsPpm }
    }
    return accountView((await store.accounts.update(account.id, patch)) as Account)
  })

  app.put<{ Params: { id: string } }>('/admin/accounts/:id/rate-limits', async (request) => {
    const account = await mustGet(request.params.id)
    const body = parse(rateLimitsBody, request.body)
    const rateLimits = { ...account.rateLimits }
    if (body.requests_per_minute !== undefined)
      rateLimits.requestsPerMinute = body.requests_per_minute ?? undefined
    if (body.tokens_per_minute !== undefined) rateLimits.tokensPerMinute = body.tokens_per_minute ?? undefined
    return accountView((await store.accounts.update(account.id, { rateLimits })) as Account)
  })

  app.put<{ Params: { id: string } }>('/admin/accounts/:id/overdraft', async (request) => {
    const account = await mustGet(request.params.id)
    const { overdraft_usd } = parse(overdraftBody, request.body)
    return accountView(
      (await store.accounts.update(account.id, { overdraft: usd(overdraft_usd) })) as Account,
    )
  })

  app.put<{ Params: { id: string } }>('/admin/accounts/:id/notices', async (request) => {
    const account = await mustGet(request.params.id)
    const body = parse(noticesBody, request.body)
    return { object: 'notices', ...toNoticesBody(await setNotices(store, deps.config, account, body)) }
  })
}

/** An account's webhook secret: read, set or rotated. */
function registerWebhookSecretRoutes(app: FastifyInstance, { deps, mustGet }: AdminContext): void {
  app.get<{ Params: { id: string } }>('/admin/accounts/:id/webhook-secret', async (request) => {
    const account = await mustGet(request.params.id)
    return { object: 'webhook_secret', secret: await deps.webhookSecrets.secretFor(account.id) }
  })

  // Sets the secret given, or a new random one (rotation); deliveries already queued are signed with
  // the secret in force when they are sent.
  app.put<{ Params: { id: string } }>('/admin/accounts/:id/webhook-secret', async (request) => {
    const account = await mustGet(request.params.id)
    const body = parse(webhookSecretBody, request.body)
    if (body.secret === undefined) {
      return { object: 'webhook_secret', secret: await deps.webhookSecrets.rotate(account.id) }
    }
    await deps.webhookSecrets.set(account.id, body.secret)
    return { object: 'webhook_secret', secret: body.secret }
  })
}

/** An account's generations, newest first, a page at a time. */
function registerGenerationRoutes(app: FastifyInstance, { store, mustGet }: AdminContext): void {
  app.get<{ Params: { id: string } }>('/admin/accounts/:id/generations', async (request) => {
    const account = await mustGet(request.params.id)
    const q = parseQuery(pageQuery, request.query)
    const page = await store.generations.listByAccount(account.id, {
      limit: q.limit,
      before: q.before,
      keyHash: q.key,
    })
    return { object: 'list', data: page.data.map(toGenerationBody), next_cursor: page.nextCursor }
  })
}

export const adminRoutes: FastifyPluginAsync<{
  deps: Deps
  adminKey: string
  /** Another credential of the operator (the console's session), checked before the admin key. */
  allow?: (request: FastifyRequest) => Promise<boolean>
}> = async (app, { deps, adminKey, allow }) => {
  app.addHook('onRequest', requireOperator(adminKey, allow))
  const context = createAdminContext(deps)
  registerAccountRoutes(app, context)
  registerAccountKeyRoutes(app, context)
  registerAccountSettingsRoutes(app, context)
  registerWebhookSecretRoutes(app, context)
  registerGenerationRoutes(app, context)
}

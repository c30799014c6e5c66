import { afterEach, describe, expect, it } from 'vitest'
import { toUsd, usd } from '../../src/billing/money.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

const adminKey = 'admin-key-for-tests-0123456789'
const admin = { authorization: `Bearer ${adminKey}` }
const hello = { model: 'mock/chat', messages: [{ role: 'user', content: 'hello there' }] }

let gw: TestGateway | undefined
afterEach(async () => {
  await gw?.close()
  gw = undefined
})

async function gateway(file: unknown = undefined, env: Record<string, string> = {}): Promise<TestGateway> {
  gw = await startGateway({ env: { GATEWAY_ADMIN_KEY: adminKey, ...env }, file, listen: true })
  return gw
}

async function post(g: TestGateway, path: string, body: unknown, headers: Record<string, string> = devAuth) {
  return fetch(`${g.origin}${path}`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
}

/** Test bodies are read loosely: the assertions check their shape. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function json(res: Response | Promise<Response>): Promise<any> {
  return (await res).json()
}

async function get(g: TestGateway, path: string, headers: Record<string, string> = devAuth) {
  return fetch(`${g.origin}${path}`, { headers })
}

/** An account created through the admin API, with a fresh key. */
async function account(g: TestGateway, body: Record<string, unknown>): Promise<Record<string, string>> {
  const created = await post(g, '/admin/accounts', body, admin)
  expect(created.status).toBe(201)
  const id = ((await json(created)) as { id: string }).id
  const key = await post(g, `/admin/accounts/${id}/keys`, {}, admin)
  expect(key.status).toBe(201)
  return { authorization: `Bearer ${((await key.json()) as { key: string }).key}` }
}

describe('generation records and credits', () => {
  it('records a blocking chat with every field, priced from the catalogue', async () => {
    const g = await gateway()
    const res = await post(g, '/v1/chat/completions', hello)
    const answer = (await json(res)) as {
      id: string
      usage: { prompt_tokens: number; completion_tokens: number }
    }
    expect(res.headers.get('x-generation-id')).toBe(answer.id)
    const rec = await json(get(g, `/v1/generation?id=${answer.id}`))
    expect(rec).toMatchObject({
      api: '/v1/chat/completions',
      generationId: answer.id,
      model: 'mock/chat',
      provider: 'mock',
      streamed: false,
      finishReason: 'stop',
      cancelled: false,
      cost_source: 'upstream',
      usage: {
        prompt_tokens: answer.usage.prompt_tokens,
        completion_tokens: answer.usage.completion_tokens,
        total_tokens: answer.usage.prompt_tokens + answer.usage.completion_tokens,
        prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0, video_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0, image_tokens: 0, audio_tokens: 0 },
        discount: 0,
        discount_percent: 0,
      },
    })
    expect(rec.createAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
    expect(rec.generationTime).toBeGreaterThanOrEqual(rec.latency)
    // mock/chat: $1 per million prompt tokens, $2 per million completion tokens.
    const expected = toUsd(
      BigInt(answer.usage.prompt_tokens) * 1_000_000n + BigInt(answer.usage.completion_tokens) * 2_000_000n,
    )
    expect(rec.usage.upstream_cost).toBe(expected)
    expect(rec.usage.cost).toBe(expected)
    const credits = await json(get(g, '/v1/credits'))
    expect(credits.data).toEqual({
      total_credits: 100,
      total_usage: expected,
      balance: toUsd(usd(100) - usd(expected)),
    })
  })

  it('records a stream, embeddings, and the routed path', async () => {
    const g = await gateway()
    const s = await post(g, '/routed/v1/chat/completions', { ...hello, stream: true })
    const text = await s.text()
    expect(text).toContain('data: [DONE]')
    const streamed = await json(get(g, `/v1/generation?id=${s.headers.get('x-generation-id')}`))
    expect(streamed).toMatchObject({
      api: '/routed/v1/chat/completions',
      streamed: true,
      cost_source: 'upstream',
      finishReason: 'stop',
    })
    expect(streamed.usage.completion_tokens).toBeGreaterThan(0)

    const e = await post(g, '/routed/v1/embeddings', { model: 'mock/embed', input: ['one two', 'three'] })
    const emb = await json(get(g, `/v1/generation?id=${e.headers.get('x-generation-id')}`))
    expect(emb).toMatchObject({ model: 'mock/embed', api: '/routed/v1/embeddings', streamed: false })
    // $0.1 per million embedding tokens.
    expect(emb.usage.upstream_cost).toBe(toUsd(BigInt(emb.usage.prompt_tokens) * 100_000n))
  })

  it('applies the account discount (0.75 = 75 % off) and a per-model override', async () => {
    const g = await gateway()
    const auth = await account(g, { id: 'disc', credits: 10, discount_percent: 0.75 })
    const res = await post(g, '/v1/chat/completions', hello, auth)
    const rec = await json(get(g, `/v1/generation?id=${res.headers.get('x-generation-id')}`, auth))
    expect(rec.usage.discount_percent).toBe(0.75)
    const up = usd(rec.usage.upstream_cost)
    expect(usd(rec.usage.discount)).toBe((up * 750_000n + 500_000n) / 1_000_000n)
    expect(usd(rec.usage.cost)).toBe(up - usd(rec.usage.discount))

    const set = await fetch(`${g.origin}/admin/accounts/disc/discount`, {
      method: 'PUT',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock/chat', discount_percent: 0.5 }),
    })
    expect(set.status).toBe(200)
    const res2 = await post(g, '/v1/chat/completions', hello, auth)
    const rec2 = await json(get(g, `/v1/generation?id=${res2.headers.get('x-generation-id')}`, auth))
    expect(rec2.usage.discount_percent).toBe(0.5)
  })

  it('one account cannot read another’s generation; a missing id is 400', async () => {
    const g = await gateway()
    const other = await account(g, { id: 'other', credits: 1 })
    const res = await post(g, '/v1/chat/completions', hello)
    const id = res.headers.get('x-generation-id')
    const foreign = await get(g, `/v1/generation?id=${id}`, other)
    expect(foreign.status).toBe(404)
    expect((await json(foreign)).error.code).toBe('generation_not_found')
    expect((await get(g, '/v1/generation?id=gen-doesnotexist')).status).toBe(404)
    const missing = await get(g, '/v1/generation')
    expect(missing.status).toBe(400)
    expect((await json(missing)).error.param).toBe('id')
  })

  it('500 concurrent requests leave total_usage equal to the sum of their record costs, to the picodollar', async () => {
    const g = await gateway()
    const auth = await account(g, { id: 'busy', credits: 1000 })
    const results = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        post(
          g,
          '/v1/chat/completions',
          {
            ...hello,
            messages: [{ role: 'user', content: `request ${i} ${'x'.repeat(i % 37)}` }],
            stream: i % 2 === 0,
          },
          auth,
        ).then(async (r) => {
          await r.text()
          return r.status
        }),
      ),
    )
    expect(results.every((s) => s === 200)).toBe(true)
    let sum = 0n
    let count = 0
    let before: string | undefined
    do {
      const page = await json(
        get(g, `/admin/accounts/busy/generations?limit=200${before ? `&before=${before}` : ''}`, admin),
      )
      for (const r of page.data) sum += usd(r.usage.cost)
      count += page.data.length
      before = page.next_cursor ?? undefined
    } while (before)
    expect(count).toBe(500)
    await g.deps.spares.idle()
    const ledger = await g.deps.store.ledger.credits('busy', Date.now())
    expect(ledger.totalUsage).toBe(sum)
    // Nothing is held but what this instance took ahead for the account (billing/spare-holds.ts).
    expect(ledger.reserved).toBe(g.deps.spares.heldFor('busy'))
    const credits = await json(get(g, '/v1/credits', auth))
    expect(credits.data.total_usage).toBe(toUsd(sum))
  })
})

describe('admission', () => {
  it('402 before the upstream when the balance is not above zero', async () => {
    const g = await gateway()
    const auth = await account(g, { id: 'broke', credits: 0 })
    const res = await post(g, '/v1/chat/completions', hello, auth)
    expect(res.status).toBe(402)
    expect((await json(res)).error).toMatchObject({
      type: 'insufficient_credits',
      code: 'insufficient_credits',
    })
    const e = await post(g, '/v1/embeddings', { model: 'mock/embed', input: 'x' }, auth)
    expect(e.status).toBe(402)
    const list = await json(get(g, '/admin/accounts/broke/generations', admin))
    expect(list.data).toEqual([])
  })

  it('50 concurrent requests against a balance for about 20 are admitted only as reservations allow', async () => {
    // Each request reserves its upper bound: prompt bytes × $1/M + 100 output tokens × $2/M. The mock
    // answers after a second, so all 50 hold their reservations at the same time.
    const g = await gateway(undefined, { MOCK_LATENCY_MS: '1000' })
    const body = { ...hello, max_completion_tokens: 100 }
    // Measure one request's reservation and actual cost on a rich account first.
    const probe = await post(g, '/v1/chat/completions', body)
    const probeRec = await json(get(g, `/v1/generation?id=${probe.headers.get('x-generation-id')}`))
    const actual = usd(probeRec.usage.cost)
    const promptBound = 8n + BigInt(Buffer.byteLength('hello there'))
    const reservation = promptBound * 1_000_000n + 100n * 2_000_000n
    const credits = reservation * 20n + reservation / 2n
    const created = await post(g, '/admin/accounts', { id: 'tight', credits: toUsd(credits) }, admin)
    expect(created.status).toBe(201)
    const keyRes = await json(post(g, '/admin/accounts/tight/keys', {}, admin))
    const auth = { authorization: `Bearer ${keyRes.key}` }

    const statuses = await Promise.all(
      Array.from({ length: 50 }, () =>
        post(g, '/v1/chat/completions', body, auth).then(async (r) => {
          await r.text()
          return r.status
        }),
      ),
    )
    const admitted = statuses.filter((s) => s === 200).length
    expect(statuses.filter((s) => s !== 200).every((s) => s === 402)).toBe(true)
    // 20 full reservations plus one capped to the half left; never more.
    expect(admitted).toBeLessThanOrEqual(21)
    expect(admitted).toBeGreaterThanOrEqual(20)
    const ledger = await g.deps.store.ledger.credits('tight', Date.now())
    expect(ledger.totalUsage).toBe(actual * BigInt(admitted))
    // docs/design/decisions.md: below zero by at most what one request's actual cost exceeded its reservation.
    const balance = ledger.totalCredits - ledger.totalUsage
    expect(balance).toBeGreaterThanOrEqual(-(actual > reservation ? actual - reservation : 0n))
    expect(ledger.reserved).toBe(0n)
  })

  it('429 with Retry-After and X-RateLimit headers past the requests-per-minute limit', async () => {
    const g = await gateway({
      accounts: [
        { id: 'rl', keys: ['sk-rate-limited-key'], credits: 5, rateLimits: { requestsPerMinute: 3 } },
      ],
    })
    const auth = { authorization: 'Bearer sk-rate-limited-key' }
    const statuses: number[] = []
    let last: Response | undefined
    for (let i = 0; i < 4; i++) {
      last = await post(g, '/v1/chat/completions', hello, auth)
      statuses.push(last.status)
      if (i === 0) {
        expect(last.headers.get('x-ratelimit-limit')).toBe('3')
        expect(last.headers.get('x-ratelimit-remaining')).toBe('2')
      }
    }
    expect(statuses).toEqual([200, 200, 200, 429])
    expect(Number(last!.headers.get('retry-after'))).toBeGreaterThan(0)
    expect(last!.headers.get('x-ratelimit-scope')).toBe('account-requests')
    expect(last!.headers.get('x-ratelimit-remaining')).toBe('0')
    expect(Number(last!.headers.get('x-ratelimit-reset'))).toBeGreaterThan(0)
    expect((await json(last!)).error).toMatchObject({
      type: 'rate_limit_error',
      code: 'rate_limit_exceeded',
    })
  })

  it('accounts without limits of their own use limits.rateLimits', async () => {
    const g = await gateway({ limits: { rateLimits: { requestsPerMinute: 2 } } })
    const statuses = []
    for (let i = 0; i < 3; i++) statuses.push((await post(g, '/v1/chat/completions', hello)).status)
    expect(statuses).toEqual([200, 200, 429])
    // An account's own limit wins over the default.
    const auth = await account(g, { id: 'roomy', credits: 1, rate_limits: { requests_per_minute: 5 } })
    for (let i = 0; i < 3; i++) expect((await post(g, '/v1/chat/completions', hello, auth)).status).toBe(200)
  })

  it('429 when the estimated tokens exceed the tokens-per-minute limit', async () => {
    const g = await gateway({
      accounts: [
        { id: 'tpm', keys: ['sk-token-limited-key'], credits: 5, rateLimits: { tokensPerMinute: 50 } },
      ],
    })
    const auth = { authorization: 'Bearer sk-token-limited-key' }
    const small = await post(g, '/v1/chat/completions', { ...hello, max_completion_tokens: 10 }, auth)
    expect(small.status).toBe(200)
    const big = await post(g, '/v1/chat/completions', { ...hello, max_completion_tokens: 1000 }, auth)
    expect(big.status).toBe(429)
    expect(big.headers.get('x-ratelimit-limit')).toBe('50')
  })
})

describe('cancelled streams', () => {
  it('a stream the client aborts after some chunks leaves one record with estimated usage', async () => {
    const g = await gateway(undefined, { MOCK_LATENCY_MS: '300' })
    const controller = new AbortController()
    const res = await fetch(`${g.origin}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...devAuth, 'content-type': 'application/json' },
      body: JSON.stringify({ ...hello, stream: true }),
      signal: controller.signal,
    })
    const id = res.headers.get('x-generation-id')!
    const reader = res.body!.getReader()
    let seen = ''
    while (!seen.includes('Mock reply')) seen += new TextDecoder().decode((await reader.read()).value)
    controller.abort()
    // The record is written when the gateway notices the disconnect.
    let rec: Record<string, unknown> | undefined
    for (let i = 0; i < 100 && !rec; i++) {
      const r = await get(g, `/v1/generation?id=${id}`)
      if (r.status === 200) rec = await json(r)
      else await new Promise((resolve) => setTimeout(resolve, 20))
    }
    expect(rec).toMatchObject({ streamed: true, cancelled: true, cost_source: 'estimate' })
    const usage = rec!.usage as { prompt_tokens: number; completion_tokens: number; cost: number }
    expect(usage.prompt_tokens).toBeGreaterThan(0)
    expect(usage.completion_tokens).toBeGreaterThan(0)
    expect(usage.cost).toBeGreaterThan(0)
    const list = await json(get(g, '/admin/accounts/dev/generations', admin))
    expect(list.data.filter((r: { generationId: string }) => r.generationId === id)).toHaveLength(1)
    const ledger = await g.deps.store.ledger.credits('dev', Date.now())
    expect(ledger.totalUsage).toBe(usd(usage.cost))
  })
})

describe('admin API', () => {
  it('is absent without GATEWAY_ADMIN_KEY and refuses requests without the admin key', async () => {
    const off = await startGateway({ listen: true })
    try {
      expect((await fetch(`${off.origin}/admin/accounts`, { headers: admin })).status).toBe(404)
    } finally {
      await off.close()
    }
    const g = await gateway()
    expect((await get(g, '/admin/accounts', {})).status).toBe(401)
    expect((await get(g, '/admin/accounts', devAuth)).status).toBe(401)
    expect((await post(g, '/admin/accounts', { id: 'x' }, devAuth)).status).toBe(401)
  })

  it('manages accounts, keys, credits and rate limits without a restart', async () => {
    const g = await gateway()
    const created = await post(g, '/admin/accounts', { id: 'acme', name: 'Acme', credits: 1.5 }, admin)
    expect(await json(created)).toMatchObject({
      id: 'acme',
      name: 'Acme',
      credits: { total_credits: 1.5, balance: 1.5 },
    })
    expect((await post(g, '/admin/accounts', { id: 'acme' }, admin)).status).toBe(409)

    const keyRes = await json(post(g, '/admin/accounts/acme/keys', {}, admin))
    expect(keyRes.key).toMatch(/^sk-jn-/)
    const auth = { authorization: `Bearer ${keyRes.key}` }
    expect((await post(g, '/v1/chat/completions', hello, auth)).status).toBe(200)
    const keys = await json(get(g, '/admin/accounts/acme/keys', admin))
    expect(keys.data).toEqual([expect.objectContaining({ id: keyRes.id, prefix: keyRes.key.slice(0, 10) })])
    expect(JSON.stringify(keys)).not.toContain(keyRes.key)

    const topUp = await json(post(g, '/admin/accounts/acme/credits', { amount: 2.25 }, admin))
    expect(topUp.total_credits).toBe(3.75)

    const limited = await fetch(`${g.origin}/admin/accounts/acme/rate-limits`, {
      method: 'PUT',
      headers: { ...admin, 'content-type': 'application/json' },
      body: JSON.stringify({ requests_per_minute: 1 }),
    })
    expect((await json(limited)).rate_limits.requests_per_minute).toBe(1)
    expect((await post(g, '/v1/chat/completions', hello, auth)).status).toBe(200)
    expect((await post(g, '/v1/chat/completions', hello, auth)).status).toBe(429)

    const revoked = await fetch(`${g.origin}/admin/accounts/acme/keys/${keyRes.id}`, {
      method: 'DELETE',
      headers: admin,
    })
    expect(await json(revoked)).toEqual({ id: keyRes.id, object: 'api_key', deleted: true })
    expect((await get(g, '/v1/models', auth)).status).toBe(401)

    const gens = await json(get(g, '/admin/accounts/acme/generations?limit=1', admin))
    expect(gens.data).toHaveLength(1)
    expect(gens.next_cursor).toBe(gens.data[0].generationId)
    const list = await json(get(g, '/admin/accounts', admin))
    expect(list.data.map((a: { id: string }) => a.id)).toEqual(expect.arrayContaining(['dev', 'acme']))
    expect((await post(g, '/admin/accounts/nobody/credits', { amount: 1 }, admin)).status).toBe(404)
    expect((await post(g, '/admin/accounts/acme/credits', { amount: 'lots' }, admin)).status).toBe(400)
    // Credits are only added: a negative amount is refused and changes nothing.
    const debit = await post(g, '/admin/accounts/acme/credits', { amount: -5 }, admin)
    expect(debit.status).toBe(400)
    expect((await json(debit)).error.param).toBe('amount')
    expect((await json(get(g, '/admin/accounts/acme', admin))).credits.total_credits).toBe(3.75)
  })

  it('rounds amounts with more than 12 decimals to the picodollar; one that rounds to zero is a 400', async () => {
    const g = await gateway()
    // A client's float sum: 17 decimals, meant as 0.3.
    const created = await post(g, '/admin/accounts', { id: 'floaty', credits: 0.1 + 0.2 }, admin)
    expect((await json(created)).credits.total_credits).toBe(0.3)
    // 1.0000000000005 is half a picodollar above one picodollar's step: rounded up.
    const topUp = await post(g, '/admin/accounts/floaty/credits', { amount: 1.0000000000005 }, admin)
    expect(topUp.status).toBe(200)
    expect((await json(get(g, '/admin/accounts/floaty', admin))).credits.total_credits).toBe(1.300000000001)
    const dust = await post(g, '/admin/accounts/floaty/credits', { amount: 4e-13 }, admin)
    expect(dust.status).toBe(400)
    expect((await json(dust)).error).toMatchObject({ type: 'invalid_request_error', param: 'amount' })
    expect((await json(get(g, '/admin/accounts/floaty', admin))).credits.total_credits).toBe(1.300000000001)
  })

  it('refuses a JSON body that is not an object (null creates no account)', async () => {
    const g = await gateway()
    const before = (await json(get(g, '/admin/accounts', admin))).data.length
    for (const body of [null, [], 1]) {
      const res = await post(g, '/admin/accounts', body, admin)
      expect(res.status).toBe(400)
      expect((await json(res)).error.type).toBe('invalid_request_error')
    }
    expect((await post(g, '/admin/accounts/dev/credits', null, admin)).status).toBe(400)
    expect((await json(get(g, '/admin/accounts', admin))).data).toHaveLength(before)
  })

  it('shows the rate limits in force (inherited ones marked) and the prefix of config-file keys', async () => {
    const g = await gateway({
      limits: { rateLimits: { requestsPerMinute: 1200 } },
      accounts: [
        {
          id: 'plain',
          keys: ['sk-plain-key-0001', { sha256: 'a'.repeat(64) }],
          rateLimits: { tokensPerMinute: 50 },
        },
      ],
    })
    const acct = await json(get(g, '/admin/accounts/plain', admin))
    expect(acct.rate_limits).toEqual({ requests_per_minute: 1200, tokens_per_minute: 50 })
    expect(acct.rate_limits_inherited).toEqual({ requests_per_minute: true, tokens_per_minute: false })
    const keys = await json(get(g, '/admin/accounts/plain/keys', admin))
    expect(keys.data.map((k: { prefix: string | null }) => k.prefix)).toEqual(
      expect.arrayContaining(['sk-plain-k', null]),
    )
  })
})

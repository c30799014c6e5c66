import OpenAI from 'openai'
import { afterEach, describe, expect, it } from 'vitest'
import { signWebhook } from '../../src/predictions/webhook-signing.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { startReceiver, type Receiver } from '../support/receiver.ts'

// An account told when its balance, or one of its keys' limits, runs low: a signed webhook event
// through the predictions' delivery, once per crossing.

const ADMIN = 'admin-key-for-notices-tests-0123456789'
const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }
const bearer = (key: string) => ({ authorization: `Bearer ${key}`, 'content-type': 'application/json' })

let gw: TestGateway | undefined
let receiver: Receiver | undefined
afterEach(async () => {
  await gw?.close()
  await receiver?.close()
  gw = receiver = undefined
})

async function call(
  g: TestGateway,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
): Promise<any> {
  const res = await fetch(`${g.origin}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  expect(res.status, path).toBeLessThan(300)
  return res.json()
}

describe('notices', () => {
  it('balance.low and key.limit.low are sent signed, once per crossing', async () => {
    receiver = await startReceiver((_req, res) => res.writeHead(204).end())
    gw = await startGateway({
      env: { GATEWAY_ADMIN_KEY: ADMIN },
      file: {
        models: [
          {
            slug: 'mock/chat',
            provider: 'mock',
            upstreamModel: 'chat',
            pricing: { prompt: 30, completion: 70 },
          },
        ],
        predictions: { webhooks: { allowHttp: true, allowedHosts: ['127.0.0.1'] } },
      },
      overrides: { background: false },
      listen: true,
    })
    const g = gw
    const account = await call(g, 'POST', '/admin/accounts', admin, { credits: 0.05 })
    const ops = await call(g, 'POST', `/admin/accounts/${account.id}/keys`, admin, { management: true })
    const url = `${receiver.origin}/junction-notices`
    const set = await call(g, 'PUT', '/v1/notices', bearer(ops.key), { url, balance_low_threshold: 0.045 })
    expect(set.data).toEqual({ url, balance_low_threshold: 0.045 })
    expect((await call(g, 'GET', `/admin/accounts/${account.id}`, admin)).notices).toEqual(set.data)
    const made = await call(g, 'POST', '/v1/keys', bearer(ops.key), {
      limit: 0.02,
      limit_low_threshold: 0.015,
    })
    const client = new OpenAI({ baseURL: `${g.origin}/v1`, apiKey: made.key, maxRetries: 0 })
    const ask = () =>
      client.chat.completions.create({ model: 'mock/chat', messages: [{ role: 'user', content: 'hello' }] })

    // Until both thresholds are crossed; each request's notices are queued before its answer.
    for (let i = 0; i < 20; i++) {
      await ask()
      const me = await call(g, 'GET', '/v1/key', bearer(made.key))
      if (me.data.limit_remaining <= 0.015) break
    }
    const credits = (await call(g, 'GET', '/v1/credits', bearer(ops.key))).data
    expect(credits.balance).toBeLessThanOrEqual(0.045)
    // More requests below both thresholds queue nothing new.
    await ask()
    await ask()
    await g.deps.webhookSender.runOnce()
    await receiver.received(2)
    expect(await g.deps.webhookSender.runOnce()).toBe(0)
    expect(receiver.requests).toHaveLength(2)

    const secret = (await call(g, 'GET', `/admin/accounts/${account.id}/webhook-secret`, admin)).secret
    const events = receiver.requests.map((r) => {
      const id = r.headers['webhook-id'] as string
      const ts = r.headers['webhook-timestamp'] as string
      expect(r.headers['webhook-signature']).toBe(signWebhook(secret, id, Number(ts), r.body))
      expect(r.url).toBe('/junction-notices')
      return JSON.parse(r.body)
    })
    const byType = Object.fromEntries(events.map((e) => [e.type, e]))
    expect(Object.keys(byType).sort()).toEqual(['balance.low', 'key.limit.low'])
    expect(byType['balance.low'].data).toMatchObject({
      account_id: account.id,
      threshold: 0.045,
      total_credits: 0.05,
    })
    expect(byType['balance.low'].data.balance).toBeLessThanOrEqual(0.045)
    expect(byType['key.limit.low'].data).toMatchObject({
      key_hash: made.data.hash,
      limit: 0.02,
      threshold: 0.015,
    })
    expect(byType['key.limit.low'].data.limit_remaining).toBeLessThanOrEqual(0.015)

    // Credits added: the balance is above the threshold again, and the next crossing is a new notice.
    await call(g, 'POST', `/admin/accounts/${account.id}/credits`, admin, { amount: 0.01 })
    const other = await call(g, 'POST', '/v1/keys', bearer(ops.key), {})
    const spender = new OpenAI({ baseURL: `${g.origin}/v1`, apiKey: other.key, maxRetries: 0 })
    for (let i = 0; i < 20; i++) {
      await spender.chat.completions.create({
        model: 'mock/chat',
        messages: [{ role: 'user', content: 'hello' }],
      })
      if ((await call(g, 'GET', '/v1/credits', bearer(ops.key))).data.balance <= 0.045) break
    }
    await g.deps.webhookSender.runOnce()
    await receiver.received(3)
    expect(JSON.parse(receiver.requests[2]!.body)).toMatchObject({
      type: 'balance.low',
      data: { total_credits: 0.06 },
    })
  })

  it('refuses a notice URL the gateway must not call', async () => {
    gw = await startGateway({ env: { GATEWAY_ADMIN_KEY: ADMIN }, listen: true })
    const account = await call(gw, 'POST', '/admin/accounts', admin, { credits: 1 })
    const ops = await call(gw, 'POST', `/admin/accounts/${account.id}/keys`, admin, { management: true })
    const res = await fetch(`${gw.origin}/v1/notices`, {
      method: 'PUT',
      headers: bearer(ops.key),
      body: JSON.stringify({ url: 'http://127.0.0.1:9/hook', balance_low_threshold: 1 }),
    })
    expect(res.status).toBe(400)
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('url')
  })
})

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it, onTestFinished } from 'vitest'
import { hashKey } from '../../src/auth/index.ts'
import type { MediaAdapter } from '../../src/providers/async-media/types.ts'
import { isWebhookSecret } from '../../src/predictions/webhook-signing.ts'
import { devAuth, startGateway } from '../support/gateway.ts'

// Webhook addresses are checked when the task is created (docs/design/decisions.md, Webhooks), and each account
// has a signing secret it can read and an operator can set or rotate.

const dir = mkdtempSync(join(tmpdir(), 'junction-pred-wh-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

function counting(): { adapter: MediaAdapter; submits: number[] } {
  const submits: number[] = []
  return {
    submits,
    adapter: {
      async submit() {
        submits.push(1)
        return { state: 'pending', job: null }
      },
      async poll() {
        return { state: 'pending', job: null }
      },
    },
  }
}

async function setup(file?: unknown, env: Record<string, string> = {}) {
  const { adapter, submits } = counting()
  const gw = await startGateway({
    env: { GATEWAY_OUTPUTS_DIR: dir, ...env },
    file,
    overrides: { background: false, mediaAdapterFor: () => adapter },
  })
  onTestFinished(() => gw.close())
  return { gw, submits }
}

describe('webhook addresses at creation', () => {
  it.each([
    ['http://hooks.example.com/x', /https/],
    ['https://127.0.0.1/hook', /not allowed/],
    ['https://10.0.0.1/hook', /not allowed/],
    ['https://169.254.169.254/latest/meta-data', /not allowed/],
    ['https://[::1]/hook', /not allowed/],
    ['https://localhost/hook', /not allowed/],
    ['https://user:pw@hooks.example.com/x', /user name or password/],
    ['not a url', /absolute URL/],
  ])('refuses %s with a 400 on param webhook, and nothing is created', async (webhook, message) => {
    const { gw, submits } = await setup()
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: devAuth,
      payload: { model: 'mock/image', input: { prompt: 'x' }, webhook },
    })
    expect(res.statusCode).toBe(400)
    expect(res.json().error).toMatchObject({ code: 'invalid_value', param: 'webhook' })
    expect(res.json().error.message).toMatch(message)
    expect(await gw.deps.runner.runOnce()).toBe(0)
    expect(submits).toHaveLength(0)
    // Nothing is held either.
    expect((await gw.deps.store.ledger.credits('dev', Date.now())).reserved).toBe(0n)
  })

  it('accepts http and a named host only when the configuration allows them (development and tests)', async () => {
    const { gw } = await setup({
      predictions: { webhooks: { allowHttp: true, allowedHosts: ['127.0.0.1'] } },
    })
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/predictions',
      headers: devAuth,
      payload: { model: 'mock/image', input: { prompt: 'x' }, webhook: 'http://127.0.0.1:9/hook' },
    })
    expect(res.statusCode).toBe(200)
    const task = await gw.deps.store.tasks.get(res.json().data.task_id)
    expect(task?.webhook).toBe('http://127.0.0.1:9/hook')
  })
})

describe('webhook secrets', () => {
  const ADMIN = 'admin-key-webhook-secrets'
  const admin = { authorization: `Bearer ${ADMIN}` }
  const fileSecret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`

  it('an account reads its secret, generated once; an admin reads, sets and rotates it', async () => {
    const { gw } = await setup(
      {
        accounts: [
          { id: 'a', keys: [{ sha256: hashKey('sk-a') }] },
          { id: 'b', keys: [{ sha256: hashKey('sk-b') }], webhookSecret: fileSecret },
        ],
      },
      { GATEWAY_ADMIN_KEY: ADMIN },
    )
    const read = async (key: string) =>
      (
        await gw.app.inject({
          method: 'GET',
          url: '/v1/webhooks/secret',
          headers: { authorization: `Bearer ${key}` },
        })
      ).json()
    const first = await read('sk-a')
    expect(isWebhookSecret(first.secret)).toBe(true)
    expect((await read('sk-a')).secret).toBe(first.secret)
    expect((await read('sk-b')).secret).toBe(fileSecret)

    const viaAdmin = await gw.app.inject({
      method: 'GET',
      url: '/admin/accounts/a/webhook-secret',
      headers: admin,
    })
    expect(viaAdmin.json().secret).toBe(first.secret)
    const rotated = await gw.app.inject({
      method: 'PUT',
      url: '/admin/accounts/a/webhook-secret',
      headers: admin,
      payload: {},
    })
    expect(rotated.statusCode).toBe(200)
    expect(rotated.json().secret).not.toBe(first.secret)
    expect((await read('sk-a')).secret).toBe(rotated.json().secret)
    const set = await gw.app.inject({
      method: 'PUT',
      url: '/admin/accounts/a/webhook-secret',
      headers: admin,
      payload: { secret: fileSecret },
    })
    expect(set.json().secret).toBe(fileSecret)
    expect((await read('sk-a')).secret).toBe(fileSecret)
    const bad = await gw.app.inject({
      method: 'PUT',
      url: '/admin/accounts/a/webhook-secret',
      headers: admin,
      payload: { secret: 'whsec_tooshort' },
    })
    expect(bad.statusCode).toBe(400)
    expect(bad.json().error.param).toBe('secret')
    const unknown = await gw.app.inject({
      method: 'GET',
      url: '/admin/accounts/zz/webhook-secret',
      headers: admin,
    })
    expect(unknown.statusCode).toBe(404)
    // Account keys never reach the admin routes.
    const asAccount = await gw.app.inject({
      method: 'GET',
      url: '/admin/accounts/a/webhook-secret',
      headers: { authorization: 'Bearer sk-a' },
    })
    expect(asAccount.statusCode).toBe(401)
  })

  it('a malformed webhookSecret in the config file is refused at start, naming the field', async () => {
    await expect(
      startGateway({
        file: { accounts: [{ id: 'a', keys: [{ sha256: hashKey('sk-a') }], webhookSecret: 'secret' }] },
      }),
    ).rejects.toThrow(/accounts\[0\]\.webhookSecret/)
  })
})

describe('the webhook of a finished task', () => {
  it('is queued once with the lookup body, and a cancel queues the cancelled body', async () => {
    const clock = { t: 1_800_000_000_000 }
    const png = Buffer.from('89504e470d0a1a0a', 'hex')
    const adapter: MediaAdapter = {
      async submit() {
        return {
          state: 'done',
          result: {
            outputs: [{ type: 'image', contentType: 'image/png', data: png }],
            usage: { kind: 'images', count: 1, tier: '1K' },
          },
        }
      },
      async poll() {
        return { state: 'pending', job: null }
      },
    }
    const gw = await startGateway({
      env: { GATEWAY_OUTPUTS_DIR: dir, GATEWAY_PUBLIC_URL: 'https://gw.example.com' },
      file: { predictions: { webhooks: { allowHttp: true, allowedHosts: ['127.0.0.1'] } } },
      overrides: { now: () => clock.t, background: false, mediaAdapterFor: () => adapter },
    })
    onTestFinished(() => gw.close())
    const create = async () =>
      (
        await gw.app.inject({
          method: 'POST',
          url: '/v1/predictions',
          headers: devAuth,
          payload: { model: 'mock/image', input: { prompt: 'x' }, webhook: 'http://127.0.0.1:9/hook' },
        })
      ).json().data.task_id as string
    const id = await create()
    await gw.deps.runner.runOnce()
    await gw.deps.runner.runOnce()
    const deliveries = await gw.deps.store.webhooks.listByTask(id)
    expect(deliveries).toHaveLength(1)
    const delivery = deliveries[0]!
    expect(delivery).toMatchObject({
      id: `msg_${id}`,
      url: 'http://127.0.0.1:9/hook',
      status: 'pending',
      attempts: 0,
    })
    const sent = JSON.parse(delivery.body)
    const lookup = (
      await gw.app.inject({ method: 'GET', url: `/v1/predictions/${id}`, headers: devAuth })
    ).json()
    expect({ ...sent, request_id: '' }).toEqual({ ...lookup, request_id: '' })
    expect(sent.data.output[0].image).toMatch(/^https:\/\/gw\.example\.com\/v1\/outputs\/out_/)

    const cancelled = await create()
    const res = await gw.app.inject({
      method: 'POST',
      url: `/v1/predictions/${cancelled}/cancel`,
      headers: devAuth,
    })
    expect(res.statusCode).toBe(200)
    const [cancelDelivery] = await gw.deps.store.webhooks.listByTask(cancelled)
    expect(JSON.parse(cancelDelivery!.body).data).toEqual({ task_id: cancelled, task_status: 'cancelled' })
  })
})

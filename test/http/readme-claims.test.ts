import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// README sentences a newcomer acts on in the first hour, checked against the gateway.

const json = { ...devAuth, 'content-type': 'application/json' }

describe('README claims', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway({ env: { GATEWAY_ADMIN_KEY: 'admin-key-for-claims-0001' } })
  })
  afterAll(() => gw.close())

  it('the mock models cost what the README says', async () => {
    const models = (await gw.app.inject({ url: '/v1/models', headers: devAuth })).json() as {
      data: { id: string; pricing: Record<string, number> }[]
    }
    const price = (id: string) => models.data.find((m) => m.id === id)?.pricing
    expect(price('mock/chat')).toMatchObject({ prompt: 1, completion: 2, cached_prompt: 0.5 })
    expect(price('mock/embed')).toMatchObject({ embedding: 0.1 })
  })

  it('GET /routed/v1/models is the same list', async () => {
    const a = await gw.app.inject({ url: '/v1/models', headers: devAuth })
    const b = await gw.app.inject({ url: '/routed/v1/models', headers: devAuth })
    expect(b.statusCode).toBe(200)
    expect(b.json()).toEqual(a.json())
  })

  it('reasoning needs enabled: an effort alone is a 400', async () => {
    const ask = (reasoning: unknown) =>
      gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: json,
        payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }], reasoning },
      })
    const alone = await ask({ effort: 'high' })
    expect(alone.statusCode).toBe(400)
    expect(alone.json().error.param).toBe('reasoning.enabled')
    expect((await ask({ enabled: true, effort: 'high' })).statusCode).toBe(200)
  })

  it('a key longer than 512 characters is refused as unknown', async () => {
    const res = await gw.app.inject({
      url: '/v1/models',
      headers: { authorization: `Bearer sk-${'x'.repeat(511)}` },
    })
    expect(res.statusCode).toBe(401)
    expect(res.json().error.code).toBe('invalid_api_key')
  })

  it('only authenticated inference requests count against the rate limit, counted before their body is read', async () => {
    const admin = { authorization: 'Bearer admin-key-for-claims-0001', 'content-type': 'application/json' }
    await gw.app.inject({
      method: 'POST',
      url: '/admin/accounts',
      headers: admin,
      payload: { id: 'counted', credits: 1, rate_limits: { requests_per_minute: 2 } },
    })
    const key = (
      await gw.app.inject({
        method: 'POST',
        url: '/admin/accounts/counted/keys',
        headers: { authorization: admin.authorization },
      })
    ).json().key as string
    const as = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
    const chat = (model: string) =>
      gw.app.inject({
        method: 'POST',
        url: '/v1/chat/completions',
        headers: as,
        payload: { model, messages: [{ role: 'user', content: 'hi' }] },
      })
    const unknownKey = await gw.app.inject({
      method: 'POST',
      url: '/v1/chat/completions',
      headers: { ...as, authorization: 'Bearer sk-not-a-key-0001' },
      payload: { model: 'mock/chat', messages: [{ role: 'user', content: 'hi' }] },
    })
    expect(unknownKey.statusCode).toBe(401)
    expect((await gw.app.inject({ url: '/v1/models', headers: as })).statusCode).toBe(200)
    // Counted before its body is read, so a request whose body is then refused counts too.
    expect((await chat('no/such-model')).statusCode).toBe(404)
    expect((await chat('mock/chat')).statusCode).toBe(200)
    const refused = await chat('mock/chat')
    expect(refused.statusCode).toBe(429)
    expect(refused.headers['x-ratelimit-scope']).toBe('account-requests')
  })
})

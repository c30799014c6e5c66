import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// GET /v1/models/{id}: a slug (with its `/`, or several) or an alias answers the list's model object.

let gw: TestGateway
beforeAll(async () => {
  gw = await startGateway({
    file: {
      models: [
        { slug: 'mock/team/sonnet', provider: 'mock', upstreamModel: 'chat', aliases: ['claude-sonnet-4-5'] },
      ],
    },
  })
})
afterAll(() => gw.close())

const get = (url: string, headers: Record<string, string> = devAuth) =>
  gw.app.inject({ method: 'GET', url, headers })

describe('GET /v1/models/{id}', () => {
  it('answers the model object of the list for a slug, on /v1 and /routed/v1', async () => {
    const list = (await get('/v1/models')).json().data as { id: string }[]
    for (const id of ['mock/chat', 'mock/embed', 'mock/image', 'mock/team/sonnet']) {
      for (const prefix of ['/v1', '/routed/v1']) {
        const res = await get(`${prefix}/models/${id}`)
        expect(res.statusCode, `${prefix} ${id}`).toBe(200)
        expect(res.json()).toEqual(list.find((m) => m.id === id))
      }
    }
    expect((await get('/v1/models/mock/team/sonnet')).json()).toMatchObject({
      id: 'mock/team/sonnet',
      object: 'model',
      owned_by: 'mock',
      type: 'chat',
      aliases: ['claude-sonnet-4-5'],
    })
  })

  it('an alias answers its model (id is the slug)', async () => {
    const res = await get('/v1/models/claude-sonnet-4-5')
    expect(res.statusCode).toBe(200)
    expect(res.json()).toMatchObject({ id: 'mock/team/sonnet', object: 'model' })
  })

  it('a percent-encoded slash is the same slug', async () => {
    const res = await get('/v1/models/mock%2Fchat')
    expect(res.statusCode).toBe(200)
    expect(res.json().id).toBe('mock/chat')
  })

  it('an unknown id is 404 model_not_found in the envelope, naming it', async () => {
    for (const id of ['gpt-6', 'mock/nope', 'mock/chat/extra']) {
      const res = await get(`/v1/models/${id}`)
      expect(res.statusCode, id).toBe(404)
      expect(res.json().error).toMatchObject({ type: 'not_found_error', code: 'model_not_found' })
      expect(res.json().error.message).toContain(id)
      expect(res.json().request_id).toBe(res.headers['x-request-id'])
    }
  })

  it('needs a key like the list', async () => {
    const res = await get('/v1/models/mock/chat', {})
    expect(res.statusCode).toBe(401)
  })
})

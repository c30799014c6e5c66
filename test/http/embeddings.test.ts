import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// The mock embedding model bounds what one request may make it compute.

const json = { ...devAuth, 'content-type': 'application/json' }

describe('mock embeddings: size of one answer', () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const credits = async () => (await gw.app.inject({ url: '/v1/credits', headers: devAuth })).json().data

  it('refuses 2,048 inputs × 4,096 dimensions with 400, and records and bills nothing', async () => {
    const before = await credits()
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/embeddings',
      headers: json,
      payload: { model: 'mock/embed', input: Array(2048).fill('x'), dimensions: 4096 },
    })
    expect(res.statusCode).toBe(400)
    expect(res.json().error).toMatchObject({
      type: 'invalid_request_error',
      code: 'invalid_value',
      param: 'dimensions',
    })
    expect(res.json()).not.toHaveProperty('data')
    // Nothing was produced: no generation record, no charge.
    const id = res.headers['x-generation-id']
    expect(id).toEqual(expect.any(String))
    const record = await gw.app.inject({ url: `/v1/generation?id=${id}`, headers: devAuth })
    expect(record.statusCode).toBe(404)
    expect(await credits()).toEqual(before)
  })

  it('still answers 2,048 inputs at the default 256 dimensions', async () => {
    const res = await gw.app.inject({
      method: 'POST',
      url: '/v1/embeddings',
      headers: json,
      payload: { model: 'mock/embed', input: Array(2048).fill('x') },
    })
    expect(res.statusCode).toBe(200)
    expect(res.json().data).toHaveLength(2048)
  })
})

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/config.ts'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// A config model's `aliases`: the bare vendor names clients send (Claude Code, Codex, SDK defaults)
// reach the model on every route; a clash refuses the start; an unknown name stays 404.

const file = {
  models: [
    {
      slug: 'mock/sonnet',
      provider: 'mock',
      upstreamModel: 'chat',
      aliases: ['claude-sonnet-4-5-20250929', 'gpt-5'],
    },
    {
      slug: 'mock/small-embed',
      provider: 'mock',
      upstreamModel: 'embed',
      type: 'embedding',
      aliases: ['te-3'],
    },
    {
      slug: 'mock/picture',
      provider: 'mock',
      upstreamModel: 'image',
      type: 'image',
      aliases: ['gpt-image-1'],
    },
  ],
}

let gw: TestGateway
beforeAll(async () => {
  gw = await startGateway({ file, overrides: { background: false } })
})
afterAll(() => gw.close())

const post = (url: string, payload: object) =>
  gw.app.inject({ method: 'POST', url, headers: devAuth, payload })

describe('model aliases', () => {
  it('a bare alias reaches its model on chat completions, blocking and streamed, on /v1 and /routed/v1', async () => {
    for (const url of ['/v1/chat/completions', '/routed/v1/chat/completions']) {
      const res = await post(url, {
        model: 'claude-sonnet-4-5-20250929',
        messages: [{ role: 'user', content: 'hi' }],
      })
      expect(res.statusCode).toBe(200)
      expect(res.json().model).toBe('mock/sonnet')
    }
    const streamed = await post('/v1/chat/completions', {
      model: 'gpt-5',
      stream: true,
      messages: [{ role: 'user', content: 'hi' }],
    })
    expect(streamed.statusCode).toBe(200)
    expect(streamed.body).toContain('"model":"mock/sonnet"')
    expect(streamed.body).toContain('data: [DONE]')
  })

  it('the generation record names the slug, not the alias', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'gpt-5',
      messages: [{ role: 'user', content: 'x' }],
    })
    const id = res.headers['x-generation-id'] as string
    const record = await gw.app.inject({ method: 'GET', url: `/v1/generation?id=${id}`, headers: devAuth })
    expect(record.json()).toMatchObject({ model: 'mock/sonnet' })
  })

  it('an alias works on embeddings and predictions, and routing extensions accept aliases', async () => {
    const emb = await post('/v1/embeddings', { model: 'te-3', input: 'hello' })
    expect(emb.statusCode).toBe(200)
    expect(emb.json().model).toBe('mock/small-embed')

    const prediction = await post('/v1/predictions', { model: 'gpt-image-1', input: { prompt: 'a fox' } })
    expect(prediction.statusCode).toBe(200)
    const task = await gw.deps.store.tasks.get(prediction.json().data.task_id as string)
    expect(task?.model).toBe('mock/picture')

    const routed = await post('/v1/chat/completions', {
      model: 'mock/chat',
      messages: [{ role: 'user', content: 'hi' }],
      model_routing_config: { available_models: ['gpt-5'], preference: 'cost' },
    })
    expect(routed.statusCode).toBe(200)
    expect(routed.json().model).toBe('mock/sonnet')
  })

  it('an unknown bare name is 404 model_not_found naming it, on every route', async () => {
    for (const [url, payload] of [
      ['/v1/chat/completions', { model: 'gpt-6', messages: [{ role: 'user', content: 'hi' }] }],
      ['/v1/embeddings', { model: 'gpt-6', input: 'hi' }],
      ['/v1/predictions', { model: 'gpt-6', input: { prompt: 'hi' } }],
    ] as const) {
      const res = await post(url, payload)
      expect(res.statusCode, url).toBe(404)
      expect(res.json().error).toMatchObject({
        type: 'not_found_error',
        code: 'model_not_found',
        param: 'model',
      })
      expect(res.json().error.message).toContain('gpt-6')
    }
  })

  it('an alias of a chat model on embeddings is the same 400 as its slug', async () => {
    const res = await post('/v1/embeddings', { model: 'gpt-5', input: 'hello' })
    expect(res.statusCode).toBe(400)
    expect(res.json().error).toMatchObject({ param: 'model' })
  })
})

describe('alias clashes refuse the start', () => {
  const model = (slug: string, aliases: string[]) => ({
    slug,
    provider: 'mock',
    upstreamModel: 'chat',
    aliases,
  })

  it.each([
    [
      'two models',
      [model('mock/a', ['gpt-5']), model('mock/b', ['gpt-5'])],
      /alias "gpt-5" is given to both mock\/a and mock\/b/,
    ],
    [
      'a config slug',
      [model('mock/a', ['mock/b']), model('mock/b', [])],
      /alias "mock\/b" of mock\/a is the slug of a model/,
    ],
    [
      'a catalogue slug',
      [model('mock/a', ['mock/chat'])],
      /alias "mock\/chat" of mock\/a is the slug of a model/,
    ],
    ['its own slug', [model('mock/a', ['mock/a'])], /alias "mock\/a" of mock\/a is the slug/],
  ])('an alias shared with %s', async (_, models, message) => {
    const start = startGateway({ file: { models } })
    await expect(start).rejects.toThrow(ConfigError)
    await expect(start).rejects.toThrow(message)
  })

  it('an alias with spaces is refused naming the field', async () => {
    await expect(startGateway({ file: { models: [model('mock/a', ['gpt 5'])] } })).rejects.toThrow(
      /models\[0\]\.aliases\[0\]/,
    )
  })
})

import type { ServerResponse } from 'node:http'
import { afterEach, describe, expect, it } from 'vitest'
import { GatewayError, UpstreamError } from '../../src/errors.ts'
import type { MediaJob } from '../../src/providers/async-media/types.ts'
import { createOpenAIImagesAdapter } from '../../src/providers/openai-compat/images.ts'
import { chatAdapterFor, mediaAdapterFor } from '../../src/providers/registry.ts'
import { makeMediaCall, reading } from '../support/media-call.ts'
import {
  jsonFile,
  sendJson,
  startFakeUpstream,
  type FakeHandler,
  type FakeUpstream,
} from '../support/fake-upstream.ts'

// The OpenAI images adapter's real HTTP code against a fake OpenAI on 127.0.0.1 answering with
// recorded /v1/images/generations bodies.

const KEY = 'sk-test'
const IMAGE_1 = Buffer.concat([
  Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'),
  Buffer.from('junction-image-1'),
])
const IMAGE_2 = Buffer.concat([
  Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex'),
  Buffer.from('junction-image-2'),
])

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c()
})

async function fake(routes: Record<string, FakeHandler>): Promise<FakeUpstream> {
  const f = await startFakeUpstream(routes)
  cleanups.push(() => f.close())
  return f
}

const job = (input: Partial<Extract<MediaJob, { family: 'image' }>['input']> = {}): MediaJob => ({
  taskId: '0123456789abcdef0123456789abcdef',
  upstreamModel: 'gpt-image-1',
  family: 'image',
  input: { prompt: 'a red bicycle', image_urls: [], num_images: 2, ...input },
})

const callFor = (up: FakeUpstream, maxOutputBytes?: number) =>
  makeMediaCall({ kind: 'openai-compat', baseUrl: `${up.origin}/v1`, apiKey: KEY, maxOutputBytes })

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p
  } catch (err) {
    return err as Error
  }
  throw new Error('expected a rejection')
}

describe('OpenAI images adapter', () => {
  it('posts the generation and answers done with the decoded images and their tier', async () => {
    const up = await fake({ 'POST /v1/images/generations': jsonFile('openai-compat/images-b64.json') })
    const step = await reading(createOpenAIImagesAdapter()).submit(
      job({ aspect_ratio: '16:9', output_format: 'png', resolution: '2K' }),
      callFor(up),
    )

    expect(step).toEqual({
      state: 'done',
      result: {
        outputs: [
          { type: 'image', contentType: 'image/png', data: IMAGE_1 },
          { type: 'image', contentType: 'image/png', data: IMAGE_2 },
        ],
        usage: { kind: 'images', count: 2, tier: '2K' },
      },
    })
    expect(up.requests).toHaveLength(1)
    const req = up.requests[0]!
    expect(req.method).toBe('POST')
    expect(req.headers.authorization).toBe(`Bearer ${KEY}`)
    expect(req.headers['content-type']).toBe('application/json')
    expect(req.body).toEqual({
      model: 'gpt-image-1',
      prompt: 'a red bicycle',
      n: 2,
      size: '1536x1024',
      output_format: 'png',
    })
  })

  it('downloads url answers and bills a square image as 1K', async () => {
    const up = await fake({
      'GET /files/img-1.png': (_req, res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'image/png' })
        res.end(IMAGE_1)
      },
    })
    up.setHandler('POST /v1/images/generations', (_req, res) =>
      sendJson(res, 200, { created: 1, data: [{ url: `${up.origin}/files/img-1.png` }] }),
    )
    const step = await reading(createOpenAIImagesAdapter()).submit(
      job({ aspect_ratio: '1:1', num_images: 1 }),
      callFor(up),
    )
    expect(step).toEqual({
      state: 'done',
      result: {
        outputs: [{ type: 'image', contentType: 'image/png', data: IMAGE_1 }],
        usage: { kind: 'images', count: 1, tier: '1K' },
      },
    })
    expect(up.requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /v1/images/generations',
      'GET /files/img-1.png',
    ])
  })

  it('a content-policy refusal (400) is a 400 GatewayError with OpenAI message', async () => {
    const up = await fake({
      'POST /v1/images/generations': jsonFile('openai-compat/images-moderation-400.json', 400),
    })
    const err = await rejection(reading(createOpenAIImagesAdapter()).submit(job(), callFor(up)))
    expect(err).toBeInstanceOf(GatewayError)
    expect(err).toMatchObject({ status: 400, code: 'upstream_invalid_request' })
    expect(err.message).toContain('Your request was rejected as a result of our safety system')
  })

  it('a refused key is a 502 whose message never holds the key', async () => {
    const up = await fake({
      'POST /v1/images/generations': (_req, res) =>
        sendJson(res, 401, {
          error: { message: `Incorrect API key provided: ${KEY}`, type: 'invalid_request_error' },
        }),
    })
    const err = await rejection(reading(createOpenAIImagesAdapter()).submit(job(), callFor(up)))
    expect(err).toMatchObject({ status: 502, code: 'upstream_error' })
    expect(err.message).not.toContain(KEY)
  })

  it('a 400 echoing the key has it scrubbed', async () => {
    const up = await fake({
      'POST /v1/images/generations': (_req, res) =>
        sendJson(res, 400, { error: { message: `bad size for key ${KEY}`, type: 'invalid_request_error' } }),
    })
    const err = await rejection(reading(createOpenAIImagesAdapter()).submit(job(), callFor(up)))
    expect(err).toMatchObject({ status: 400 })
    expect(err.message).toContain('bad size for key')
    expect(err.message).not.toContain(KEY)
  })

  it('a base64 image larger than maxOutputBytes is a 502', async () => {
    const up = await fake({ 'POST /v1/images/generations': jsonFile('openai-compat/images-b64.json') })
    const err = await rejection(
      reading(createOpenAIImagesAdapter()).submit(job(), callFor(up, IMAGE_1.length - 1)),
    )
    expect(err).toBeInstanceOf(UpstreamError)
    expect(err).toMatchObject({
      status: 502,
      message: `upstream openai: output larger than ${IMAGE_1.length - 1} bytes`,
    })
  })

  it('a downloaded image larger than maxOutputBytes is a 502', async () => {
    const up = await fake({
      'GET /files/big.png': (_req, res: ServerResponse) => {
        res.writeHead(200, { 'content-type': 'image/png' })
        res.end(Buffer.alloc(4096, 1))
      },
    })
    up.setHandler('POST /v1/images/generations', (_req, res) =>
      sendJson(res, 200, { data: [{ url: `${up.origin}/files/big.png` }] }),
    )
    const err = await rejection(reading(createOpenAIImagesAdapter()).submit(job(), callFor(up, 4095)))
    expect(err).toMatchObject({ status: 502, message: 'upstream openai: output larger than 4095 bytes' })
  })

  it('reference images are refused before anything is sent', async () => {
    const up = await fake({ 'POST /v1/images/generations': jsonFile('openai-compat/images-b64.json') })
    const err = await rejection(
      reading(createOpenAIImagesAdapter()).submit(
        job({ image_urls: ['https://example.com/a.png'] }),
        callFor(up),
      ),
    )
    expect(err).toMatchObject({ status: 400, code: 'unsupported_parameter', param: 'input.image_urls' })
    expect(up.requests).toHaveLength(0)
  })

  it('poll is never needed: it answers failed rather than hang', async () => {
    const up = await fake({})
    expect(await reading(createOpenAIImagesAdapter()).poll(job(), null, callFor(up))).toMatchObject({
      state: 'failed',
    })
    expect(up.requests).toHaveLength(0)
  })
})

describe('mediaAdapterFor', () => {
  it('openai-compat makes images, replicate, gemini and mock predictions; anthropic none', () => {
    const options = { now: () => 0, mockDelayMs: 0 }
    expect(mediaAdapterFor('openai-compat', options)?.cancel).toBeUndefined()
    expect(typeof mediaAdapterFor('openai-compat', options)?.submit).toBe('function')
    expect(typeof mediaAdapterFor('replicate', options)?.cancel).toBe('function')
    expect(typeof mediaAdapterFor('mock', options)?.poll).toBe('function')
    expect(mediaAdapterFor('gemini', options)?.cancel).toBeUndefined()
    expect(typeof mediaAdapterFor('gemini', options)?.submit).toBe('function')
    expect(mediaAdapterFor('anthropic', options)).toBeUndefined()
  })

  it('replicate makes media only: it has no chat capability to route chat to', () => {
    expect(chatAdapterFor('replicate', () => 0)).toBeUndefined()
    expect(typeof chatAdapterFor('anthropic', () => 0)?.chat).toBe('function')
  })
})

import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAuth, startGateway, type TestGateway } from '../support/gateway.ts'

// GET /v1/models labels every price with the unit it is given per: tokens, images, seconds of video,
// characters, audio tokens (a single `unit` only when all of a model's prices share one).

let gw: TestGateway
beforeAll(async () => {
  gw = await startGateway({
    file: {
      models: [
        {
          slug: 'mock/speech-both',
          provider: 'mock',
          upstreamModel: 'speech',
          type: 'speech',
          pricing: { speechPerMillionCharacters: 15, speechAudioTokens: 10 },
        },
      ],
    },
  })
})
afterAll(() => gw.close())

async function pricing(): Promise<Record<string, Record<string, unknown>>> {
  const res = await gw.app.inject({ method: 'GET', url: '/v1/models', headers: devAuth })
  expect(res.statusCode).toBe(200)
  const data = res.json().data as { id: string; pricing: Record<string, unknown> }[]
  return Object.fromEntries(data.map((m) => [m.id, m.pricing]))
}

describe('GET /v1/models pricing units', () => {
  it('chat and embeddings: per million tokens', async () => {
    const p = await pricing()
    expect(p['mock/chat']).toEqual({
      currency: 'USD',
      unit: 'per_million_tokens',
      prompt: 1,
      completion: 2,
      reasoning: 2,
      cached_prompt: 0.5,
      units: {
        prompt: 'per_million_tokens',
        completion: 'per_million_tokens',
        reasoning: 'per_million_tokens',
        cached_prompt: 'per_million_tokens',
      },
    })
    expect(p['mock/embed']).toMatchObject({ unit: 'per_million_tokens', embedding: 0.1 })
  })

  it('images per image, video per second, speech per million characters or audio tokens', async () => {
    const p = await pricing()
    expect(p['mock/image']).toEqual({
      currency: 'USD',
      unit: 'per_image',
      image_per_image: { '1K': 0.01, '2K': 0.02, '4K': 0.04 },
      units: { image_per_image: 'per_image' },
    })
    expect(p['mock/video']).toMatchObject({ unit: 'per_second', units: { video_per_second: 'per_second' } })
    expect(p['mock/speech']).toEqual({
      currency: 'USD',
      unit: 'per_million_characters',
      speech_per_million_characters: 10,
      units: { speech_per_million_characters: 'per_million_characters' },
    })
    // Two units: no single `unit`, each price labelled.
    expect(p['mock/speech-both']).toEqual({
      currency: 'USD',
      speech_per_million_characters: 15,
      speech_audio_tokens: 10,
      units: {
        speech_per_million_characters: 'per_million_characters',
        speech_audio_tokens: 'per_million_audio_tokens',
      },
    })
  })
})

import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig } from '../../../src/config.ts'
import { builtinProviders } from '../../../src/providers/catalogue.ts'
import { priceProblems, type PricedDeployment } from '../../../src/routing/price-check.ts'

// Every configured price must be chargeable from what the model's adapter reports: one case a model
// type and provider kind, each refused with the model and the price named.

const withFile = (file: unknown, env: Record<string, string> = {}) =>
  loadConfig({ GATEWAY_CONFIG: 'junction.json', ...env }, () => JSON.stringify(file))

const speech = (table: PricedDeployment['table']): PricedDeployment => ({
  slug: 'google/tts',
  type: 'speech',
  family: 'speech',
  provider: 'google',
  kind: 'gemini',
  table,
})

describe('priceProblems', () => {
  it('a speech model priced per character on an adapter that reports audio tokens only is refused', () => {
    // Gemini's speech adapter reported only audio tokens before it counted characters.
    const problems = priceProblems(speech({ speechPerMillionCharacters: 10 }), ['audio_tokens'])
    expect(problems).toEqual([
      expect.stringMatching(/^speechPerMillionCharacters prices characters.*speechAudioTokens/),
      expect.stringMatching(/^no speechAudioTokens price.*audio tokens would be billed \$0/),
    ])
  })

  it('speech on Gemini and the mock: per character, per audio token, or both', () => {
    for (const kind of ['gemini', 'mock'] as const) {
      expect(priceProblems({ ...speech({ speechPerMillionCharacters: 10 }), kind })).toEqual([])
      expect(priceProblems({ ...speech({ speechAudioTokens: 10 }), kind })).toEqual([])
      expect(
        priceProblems({ ...speech({ speechPerMillionCharacters: 1, speechAudioTokens: 10 }), kind }),
      ).toEqual([])
    }
    expect(priceProblems(speech({ prompt: 1, completion: 2 }))).toEqual([
      expect.stringMatching(/prompt is not a price of speech models/),
      expect.stringMatching(/completion is not a price of speech models/),
      expect.stringMatching(/no speechPerMillionCharacters or speechAudioTokens price/),
    ])
  })

  it('a chat model priced per image is refused, on every chat provider kind', () => {
    for (const kind of ['openai-compat', 'anthropic', 'gemini', 'mock'] as const) {
      const problems = priceProblems({
        slug: 'team/chat',
        type: 'chat',
        provider: 'p',
        kind,
        table: { imageByTier: { '1K': 0.04 } },
      })
      expect(problems).toEqual([
        expect.stringMatching(/^imageByTier is not a price of chat models/),
        expect.stringMatching(/no prompt price, so its input tokens would be billed \$0/),
        expect.stringMatching(/no completion price, so its output tokens would be billed \$0/),
      ])
    }
  })

  it('a chat model needs both token prices; refinements alone do not bill plain tokens', () => {
    const chat = (table: PricedDeployment['table']): PricedDeployment => ({
      slug: 'team/chat',
      type: 'chat',
      provider: 'p',
      kind: 'openai-compat',
      table,
    })
    expect(priceProblems(chat({ prompt: 1, completion: 2, cachedPrompt: 0.1, reasoning: 3 }))).toEqual([])
    expect(priceProblems(chat({ prompt: 1 }))).toEqual([expect.stringMatching(/no completion price/)])
    expect(priceProblems(chat({ cachedPrompt: 1, completion: 2 }))).toEqual([
      expect.stringMatching(/no prompt price/),
    ])
    // `embedding` stands in for `prompt` (compilePrice), but never beside it.
    expect(priceProblems(chat({ embedding: 1, completion: 2 }))).toEqual([])
    expect(priceProblems(chat({ prompt: 1, embedding: 1, completion: 2 }))).toEqual([
      expect.stringMatching(/embedding is never charged, prompt is charged instead/),
    ])
  })

  it('an embedding model priced per output token, or on a kind without embeddings, is refused', () => {
    const emb = (kind: PricedDeployment['kind'], table: PricedDeployment['table']): PricedDeployment => ({
      slug: 'team/emb',
      type: 'embedding',
      provider: 'p',
      kind,
      table,
    })
    expect(priceProblems(emb('openai-compat', { embedding: 0.1 }))).toEqual([])
    expect(priceProblems(emb('gemini', { prompt: 0.1 }))).toEqual([])
    expect(priceProblems(emb('mock', { embedding: 0.1, completion: 1 }))).toEqual([
      expect.stringMatching(/completion is not a price of embedding models/),
    ])
    expect(priceProblems(emb('anthropic', { embedding: 0.1 }))).toEqual([
      expect.stringMatching(/anthropic serves no embedding models/),
    ])
  })

  it('image and video models: priced in their own unit, on a kind that makes them', () => {
    const media = (
      type: 'image' | 'video',
      family: PricedDeployment['family'],
      kind: PricedDeployment['kind'],
      table: PricedDeployment['table'],
    ): PricedDeployment => ({ slug: `team/${family}`, type, family, provider: 'p', kind, table })
    expect(priceProblems(media('image', 'image', 'replicate', { imageByTier: { '1K': 0.003 } }))).toEqual([])
    expect(
      priceProblems(media('image', 'image', 'openai-compat', { videoPerSecond: { '720P': 1 } })),
    ).toEqual([
      expect.stringMatching(/videoPerSecond is not a price of image models/),
      expect.stringMatching(/no imageByTier price, so its images would be billed \$0/),
    ])
    // An empty tier list prices nothing.
    expect(priceProblems(media('image', 'image', 'mock', { imageByTier: {} }))).toEqual([
      expect.stringMatching(/no imageByTier price/),
    ])
    expect(priceProblems(media('video', 'video-a', 'gemini', { videoPerSecond: { '720P': 0.4 } }))).toEqual(
      [],
    )
    expect(
      priceProblems(media('video', 'video-a', 'replicate', { videoPerSecond: { '720P': 0.4 } })),
    ).toEqual([expect.stringMatching(/replicate serves no video \(video-a\) models/)])
  })

  it('a model without a price, or with an empty table, is free by choice and not refused', () => {
    expect(priceProblems(speech({}))).toEqual([])
  })
})

describe('loadConfig: the price check at start', () => {
  it('every built-in model passes with its list price, every provider enabled', () => {
    const env = Object.fromEntries(
      builtinProviders.flatMap((p) => (p.keyEnv ? [[p.keyEnv, 'test-key-0000']] : [])),
    )
    expect(() => loadConfig(env)).not.toThrow()
  })

  it('refuses a config file whose model cannot be charged, naming the model and the price', () => {
    const load = () =>
      withFile({
        providers: { local: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:9/v1' } },
        models: [
          { slug: 'local/llama', pricing: { prompt: 1, completion: 2 } },
          { slug: 'local/painter', pricing: { imageByTier: { '1K': 0.04 } } },
        ],
      })
    expect(load).toThrow(ConfigError)
    expect(load).toThrow(
      /prices: model local\/painter on provider local \(openai-compat\): imageByTier is not a price of chat models/,
    )
  })

  it('checks each deployment of a model with its own price', () => {
    expect(() =>
      withFile({
        providers: {
          a: { kind: 'openai-compat', baseUrl: 'http://127.0.0.1:9/v1' },
          b: { kind: 'anthropic', baseUrl: 'http://127.0.0.1:10' },
        },
        models: [
          {
            slug: 'team/chat',
            deployments: [
              { provider: 'a', pricing: { prompt: 1, completion: 2 } },
              { provider: 'b', pricing: { prompt: 1 } },
            ],
          },
        ],
      }),
    ).toThrow(/model team\/chat on provider b \(anthropic\): no completion price/)
  })
})

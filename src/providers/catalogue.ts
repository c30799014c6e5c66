import type { MediaFamily } from '../domain/media.ts'
import type { ProviderKind } from '../domain/models.ts'

// Providers that zero-config enables when their key variable is set, and the models each brings.
// Groq, DeepSeek, Mistral and Together speak the OpenAI protocol: they are entries here, not code.

export interface BuiltinProvider {
  name: string
  kind: ProviderKind
  /** Environment variable holding the key; absent for providers that need none. */
  keyEnv?: string
  baseUrlEnv?: string
  baseUrl: string
  /** OpenAI-compatible: where the output limit goes (see UpstreamConfig); `max_tokens` unless set. */
  outputLimitField?: 'max_completion_tokens' | 'max_tokens'
}

export const builtinProviders: readonly BuiltinProvider[] = [
  { name: 'mock', kind: 'mock', baseUrl: 'mock://local' },
  {
    name: 'openai',
    kind: 'openai-compat',
    keyEnv: 'OPENAI_API_KEY',
    baseUrlEnv: 'OPENAI_BASE_URL',
    baseUrl: 'https://api.openai.com/v1',
    outputLimitField: 'max_completion_tokens',
  },
  {
    name: 'groq',
    kind: 'openai-compat',
    keyEnv: 'GROQ_API_KEY',
    baseUrlEnv: 'GROQ_BASE_URL',
    baseUrl: 'https://api.groq.com/openai/v1',
    outputLimitField: 'max_completion_tokens',
  },
  {
    name: 'deepseek',
    kind: 'openai-compat',
    keyEnv: 'DEEPSEEK_API_KEY',
    baseUrlEnv: 'DEEPSEEK_BASE_URL',
    baseUrl: 'https://api.deepseek.com/v1',
  },
  {
    name: 'mistral',
    kind: 'openai-compat',
    keyEnv: 'MISTRAL_API_KEY',
    baseUrlEnv: 'MISTRAL_BASE_URL',
    baseUrl: 'https://api.mistral.ai/v1',
  },
  {
    name: 'together',
    kind: 'openai-compat',
    keyEnv: 'TOGETHER_API_KEY',
    baseUrlEnv: 'TOGETHER_BASE_URL',
    baseUrl: 'https://api.together.xyz/v1',
  },
  {
    name: 'anthropic',
    kind: 'anthropic',
    keyEnv: 'ANTHROPIC_API_KEY',
    baseUrlEnv: 'ANTHROPIC_BASE_URL',
    baseUrl: 'https://api.anthropic.com',
  },
  {
    name: 'google',
    kind: 'gemini',
    keyEnv: 'GEMINI_API_KEY',
    baseUrlEnv: 'GEMINI_BASE_URL',
    baseUrl: 'https://generativelanguage.googleapis.com',
  },
  {
    name: 'replicate',
    kind: 'replicate',
    keyEnv: 'REPLICATE_API_TOKEN',
    baseUrlEnv: 'REPLICATE_BASE_URL',
    baseUrl: 'https://api.replicate.com',
  },
]

/** A model a built-in provider brings: one deployment on that provider. */
export interface CatalogueModel {
  slug: string
  provider: string
  upstreamModel: string
  type: 'chat' | 'embedding' | 'image' | 'video' | 'speech'
  /** Image, video and speech models: the input rules of their predictions (schemas/predictions.ts). */
  family?: MediaFamily
  /** The model's own output ceiling, when it is below `limits.defaultMaxOutputTokens` (16 384). */
  maxOutputTokens?: number
  /**
   * Names requests may use besides the slug: the vendor's own model name where it is exactly the
   * upstream model (`gpt-5`, `claude-sonnet-4-5`), so clients that send bare vendor names (Codex,
   * Claude Code, SDK defaults) reach it. A config model's alias or slug takes the name first.
   */
  aliases?: readonly string[]
}

const chat = (provider: string, upstreamModel: string): CatalogueModel => ({
  slug: `${provider}/${upstreamModel}`,
  provider,
  upstreamModel,
  type: 'chat',
})
const embedding = (provider: string, upstreamModel: string): CatalogueModel => ({
  ...chat(provider, upstreamModel),
  type: 'embedding',
})

const media = (provider: string, upstreamModel: string, family: MediaFamily): CatalogueModel => ({
  ...chat(provider, upstreamModel),
  type: family === 'speech' ? 'speech' : family === 'image' ? 'image' : 'video',
  family,
})

/** Providers whose model names are the vendor's own: their upstream model name is an exact alias. */
const BARE_NAMES = new Set(['openai', 'anthropic'])

const catalogue: readonly CatalogueModel[] = [
  chat('mock', 'chat'),
  embedding('mock', 'embed'),
  // The mock's media models: one per input family, real PNG, MP4 and audio bytes (docs/clients/predictions.md).
  media('mock', 'image', 'image'),
  media('mock', 'video', 'video'),
  media('mock', 'speech', 'speech'),
  media('mock', 'video-a', 'video-a'),
  media('mock', 'video-b', 'video-b'),
  media('mock', 'video-c', 'video-c'),
  chat('openai', 'gpt-5'),
  chat('openai', 'gpt-5-mini'),
  chat('openai', 'gpt-5-nano'),
  chat('openai', 'gpt-4.1'),
  chat('openai', 'gpt-4.1-mini'),
  chat('openai', 'gpt-4.1-nano'),
  chat('openai', 'gpt-4o'),
  chat('openai', 'gpt-4o-mini'),
  chat('openai', 'o3'),
  chat('openai', 'o4-mini'),
  embedding('openai', 'text-embedding-3-small'),
  embedding('openai', 'text-embedding-3-large'),
  media('openai', 'gpt-image-1', 'image'),
  chat('groq', 'llama-3.3-70b-versatile'),
  chat('groq', 'llama-3.1-8b-instant'),
  // DeepSeek refuses max_tokens above 8 192 on deepseek-chat (api-docs.deepseek.com, models & pricing).
  { ...chat('deepseek', 'deepseek-chat'), maxOutputTokens: 8192 },
  chat('deepseek', 'deepseek-reasoner'),
  chat('mistral', 'mistral-large-latest'),
  chat('mistral', 'mistral-small-latest'),
  embedding('mistral', 'mistral-embed'),
  chat('together', 'meta-llama/Llama-3.3-70B-Instruct-Turbo'),
  chat('anthropic', 'claude-opus-4-6'),
  chat('anthropic', 'claude-sonnet-4-6'),
  chat('anthropic', 'claude-opus-4-5'),
  chat('anthropic', 'claude-sonnet-4-5'),
  chat('anthropic', 'claude-haiku-4-5'),
  chat('google', 'gemini-3-pro-preview'),
  chat('google', 'gemini-3-flash-preview'),
  chat('google', 'gemini-2.5-pro'),
  chat('google', 'gemini-2.5-flash'),
  chat('google', 'gemini-2.5-flash-lite'),
  embedding('google', 'gemini-embedding-001'),
  embedding('google', 'text-embedding-004'),
  // The speech model of docs/design/api-contract.md: its 30 voices are Gemini's prebuilt voices.
  media('google', 'gemini-2.5-flash-preview-tts', 'speech'),
  media('google', 'gemini-2.5-pro-preview-tts', 'speech'),
  // Video model A (4/6/8 s, 720P–4K, first/last frame, references, audio): Veo 3.1.
  media('google', 'veo-3.1-generate-preview', 'video-a'),
  media('replicate', 'black-forest-labs/flux-schnell', 'image'),
  // Video model B (1–15 s, 480P/720P, seven aspect ratios): Seedance 1 Lite.
  media('replicate', 'bytedance/seedance-1-lite', 'video-b'),
  // Video model C (4/8/12 s, 720P/1080P): Sora 2.
  media('replicate', 'openai/sora-2', 'video-c'),
]

export const builtinModels: readonly CatalogueModel[] = catalogue.map((m) =>
  BARE_NAMES.has(m.provider) ? { ...m, aliases: [m.upstreamModel] } : m,
)

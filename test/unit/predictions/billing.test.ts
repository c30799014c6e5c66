import { describe, expect, it } from 'vitest'
import { compilePrice, priceUsage } from '../../../src/billing/prices.ts'
import { taskCostBound } from '../../../src/predictions/billing.ts'

// A speech task's hold must cover what the task can be charged: both units when the model has both.

const input = (prompt: string) => ({
  family: 'speech' as const,
  input: {
    prompt,
    style_instructions: 'Say the following.',
    voice: 'Kore',
    language: 'en-US',
    output_format: 'mp3' as const,
  },
})

describe('taskCostBound for speech', () => {
  it('covers characters and audio tokens together when the model is priced both ways', () => {
    const price = compilePrice({ speechPerMillionCharacters: 15, speechAudioTokens: 10 })
    const task = input('x'.repeat(100))
    // 118 characters; at most 3 audio tokens a character plus 250.
    const charged = priceUsage({ kind: 'speech', characters: 118, audioTokens: 3 * 118 + 250 }, price)
    expect(taskCostBound(task, price)).toBeGreaterThanOrEqual(charged)
  })

  it('is the one price where the model has one', () => {
    const task = input('hello')
    expect(taskCostBound(task, compilePrice({ speechPerMillionCharacters: 1_000_000 }))).toBe(
      23n * 1_000_000_000_000n,
    )
    expect(taskCostBound(task, compilePrice({ speechAudioTokens: 1_000_000 }))).toBe(
      (23n * 3n + 250n) * 1_000_000_000_000n,
    )
  })
})

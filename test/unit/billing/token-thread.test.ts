import { afterEach, describe, expect, it } from 'vitest'
import { createTokenThread, type TokenThread } from '../../../src/billing/token-thread.ts'
import { countTokens } from '../../../src/billing/tokens.ts'

// The counting thread answers what the in-process counter answers, and goes away when unused.

let thread: TokenThread | undefined
afterEach(async () => {
  await thread?.close()
  thread = undefined
})

const texts = [
  'Hello, world! How are you today?',
  'def f(x):\n    return x ** 2  # squares\n',
  'Text that looks like a special token: <|endoftext|> is counted as text.',
  '数据科学与人工智能 🚀 émigré naïve façade',
  'x'.repeat(5_000),
]

describe('token counting thread', () => {
  it('counts as the in-process counter does, each answer to its own question', async () => {
    thread = createTokenThread()
    const counted = await Promise.all(texts.map((t) => thread!.count(t)))
    const expected = await Promise.all(texts.map((t) => countTokens(t)))
    expect(counted).toEqual(expected)
    expect(counted[0]).toBeGreaterThan(5)
  })

  it('ends when idle, and a later count starts it again', async () => {
    let exited!: () => void
    const idleExit = new Promise<void>((resolve) => (exited = resolve))
    thread = createTokenThread({ idleMs: 1, onIdleExit: () => exited() })
    expect(await thread.count('one two three')).toBe(await countTokens('one two three'))
    await idleExit
    expect(await thread.count('four five')).toBe(await countTokens('four five'))
  })

  it('answers after close with a new thread', async () => {
    thread = createTokenThread()
    expect(await thread.count('hello')).toBe(1)
    await thread.close()
    expect(await thread.count('hello there')).toBe(2)
  })
})

import { describe, expect, it } from 'vitest'
import { TALLY_BATCH, countTokens, createTokenMeter, type TokenCounter } from '../../../src/billing/tokens.ts'

// createTokenMeter: a stream's tokens against a limit, counted only once they could pass it, each
// character once. The counters here count what the test decides and record what they were handed.

function recording(perText: (text: string) => number = (t) => t.split(' ').length - 1) {
  const handed: string[] = []
  const count: TokenCounter = async (text) => {
    handed.push(text)
    return perText(text)
  }
  return { handed, count }
}

describe('createTokenMeter', () => {
  it('counts nothing while the bytes so far cannot pass the limit, then counts each character once', async () => {
    const { handed, count } = recording()
    const meter = createTokenMeter(100, count)
    // 20 chunks of 5 bytes, one token each: 100 bytes, never more than the limit.
    for (let i = 0; i < 20; i++) {
      meter.add(' word')
      expect(meter.needsCount()).toBe(false)
    }
    expect(handed).toEqual([])
    meter.add(' word')
    expect(meter.needsCount()).toBe(true)
    expect(await meter.exceeded()).toBe(false) // 21 tokens
    // Counted: the next 79 bytes cannot pass it either.
    for (let i = 0; i < 15; i++) meter.add(' word')
    expect(meter.needsCount()).toBe(false)
    expect(await meter.total()).toBe(36)
    expect(handed.join('')).toBe(' word'.repeat(36))
  })

  it('says exceeded once the tokens counted pass the limit', async () => {
    const { count } = recording()
    const meter = createTokenMeter(10, count)
    const seen: boolean[] = []
    for (let i = 0; i < 12; i++) {
      meter.add(' word')
      seen.push(meter.needsCount() && (await meter.exceeded()))
    }
    expect(seen.indexOf(true)).toBe(10) // the 11th token
  })

  it('bounds by UTF-8 bytes, so text of many tokens a character is caught too', async () => {
    const { count } = recording((t) => Buffer.byteLength(t)) // a token a byte: the worst case
    const meter = createTokenMeter(10, count)
    meter.add('ééééé') // 10 bytes
    expect(meter.needsCount()).toBe(false)
    meter.add('é')
    expect(meter.needsCount()).toBe(true)
    expect(await meter.exceeded()).toBe(true)
  })

  it('holds at most a batch of text whatever the limit', async () => {
    const { handed, count } = recording()
    const meter = createTokenMeter(Number.MAX_SAFE_INTEGER, count)
    const piece = 'x'.repeat(1024)
    for (let i = 0; i < TALLY_BATCH / 1024; i++) {
      if (meter.needsCount()) await meter.exceeded()
      meter.add(piece)
    }
    expect(meter.needsCount()).toBe(true)
    await meter.exceeded()
    expect(handed.map((t) => t.length)).toEqual([TALLY_BATCH])
  })

  it('a failing counter neither throws nor counts nothing: bytes/4 stands in', async () => {
    const meter = createTokenMeter(1, async () => {
      throw new Error('tokenizer broke')
    })
    meter.add('x'.repeat(40))
    expect(await meter.exceeded()).toBe(true)
    expect(await meter.total()).toBe(10)
  })

  it('with the real tokenizer, a one-token word is one token', async () => {
    const meter = createTokenMeter(1000, countTokens)
    for (let i = 0; i < 1001; i++) meter.add(' word')
    expect(meter.needsCount() && (await meter.exceeded())).toBe(true)
    expect(await meter.total()).toBe(1001)
  })
})

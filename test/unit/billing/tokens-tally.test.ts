import { describe, expect, it } from 'vitest'
import { TALLY_BATCH, TALLY_QUEUE, createTokenTally, type TokenCounter } from '../../../src/billing/tokens.ts'

// createTokenTally with a counter whose pace the test sets: exactly what is handed to the counter,
// what is held, what is skipped, and how the skipped text is priced.

/** One token per 'y': text of `n` characters, half of them 'y', tokenizes to n / 2. */
const half = (n: number) => 'yz'.repeat(n / 2)
const ys = (text: string) => text.split('y').length - 1

/** A counter that records what it is given and answers only once `open` is called. */
function gatedCounter(tokens: (text: string) => number = ys) {
  const calls: number[] = []
  let open = (): void => {}
  const gate = new Promise<void>((resolve) => (open = resolve))
  const count: TokenCounter = async (text) => {
    calls.push(text.length)
    await gate
    return tokens(text)
  }
  return { calls, count, open: () => open() }
}

const turn = () => new Promise((resolve) => setImmediate(resolve))

describe('createTokenTally, exactly', () => {
  it('totals nothing at 0 without calling the counter', async () => {
    const { calls, count, open } = gatedCounter()
    open()
    const tally = createTokenTally(count)
    tally.add('')
    expect(tally.pendingLength()).toBe(0)
    expect(await tally.total()).toBe(0)
    expect(calls).toEqual([])
  })

  it('hands a batch over the moment it reaches TALLY_BATCH characters, and nothing empty', async () => {
    const { calls, count, open } = gatedCounter()
    open()
    const tally = createTokenTally(count)
    tally.add(half(TALLY_BATCH - 2))
    expect(tally.pendingLength()).toBe(TALLY_BATCH - 2)
    tally.add('y')
    expect(tally.pendingLength()).toBe(TALLY_BATCH - 1)
    expect(tally.heldLength()).toBe(TALLY_BATCH - 1)
    tally.add('z')
    expect(tally.pendingLength()).toBe(0)
    expect(tally.heldLength()).toBe(TALLY_BATCH)
    await turn()
    expect(calls).toEqual([TALLY_BATCH])
    expect(tally.heldLength()).toBe(0)
    expect(await tally.total()).toBe(TALLY_BATCH / 2)
    expect(calls).toEqual([TALLY_BATCH])
  })

  it('keeps TALLY_QUEUE batches while the counter is behind and prices the rest at the counted rate', async () => {
    const { calls, count, open } = gatedCounter()
    const tally = createTokenTally(count)
    for (let b = 1; b <= TALLY_QUEUE; b++) {
      tally.add(half(TALLY_BATCH))
      expect(tally.heldLength()).toBe(b * TALLY_BATCH)
    }
    // The queue is full: the next batches are dropped, only their length is kept.
    tally.add(half(TALLY_BATCH))
    tally.add(half(TALLY_BATCH / 2))
    expect(tally.pendingLength()).toBe(TALLY_BATCH / 2)
    tally.add(half(TALLY_BATCH / 2))
    expect(tally.pendingLength()).toBe(0)
    expect(tally.heldLength()).toBe(TALLY_QUEUE * TALLY_BATCH)
    // The end of the stream is always counted: 4 characters, 4 tokens.
    tally.add('yyyy')
    const total = tally.total()
    expect(tally.heldLength()).toBe(TALLY_QUEUE * TALLY_BATCH + 4)
    await turn()
    expect(calls).toEqual([TALLY_BATCH])
    open()
    // Counted: 4 batches at one token per two characters and the tail, 131 076 tokens for 262 148
    // characters; skipped: 2 batches, 131 072 characters at that rate, 65 536.99… tokens.
    expect(await total).toBe(131_076 + 65_537)
    expect(calls).toEqual([TALLY_BATCH, TALLY_BATCH, TALLY_BATCH, TALLY_BATCH, 4])
    expect(tally.heldLength()).toBe(0)
  })

  it('rounds the price of skipped text to the nearest token', async () => {
    // Three tokens per four characters counted, so 3 × 65 536 / 4 for each skipped batch.
    const { count, open } = gatedCounter((text) => Math.round((text.length * 3) / 4))
    const tally = createTokenTally(count)
    for (let b = 0; b < TALLY_QUEUE + 1; b++) tally.add('w'.repeat(TALLY_BATCH))
    tally.add('w'.repeat(6))
    const total = tally.total()
    open()
    // Counted 4 × 49 152 + round(4.5) = 196 613 tokens for 262 150 characters; 65 536 skipped characters
    // at that rate are 49 152.37…, 49 152 tokens.
    expect(await total).toBe(196_613 + 49_152)
  })

  it('takes batches again once the counter has caught up', async () => {
    const { calls, count, open } = gatedCounter()
    const tally = createTokenTally(count)
    for (let b = 0; b < TALLY_QUEUE; b++) tally.add(half(TALLY_BATCH))
    open()
    await turn()
    expect(tally.heldLength()).toBe(0)
    for (let b = 0; b < TALLY_QUEUE; b++) tally.add('y'.repeat(TALLY_BATCH))
    expect(await tally.total()).toBe((TALLY_QUEUE * TALLY_BATCH) / 2 + TALLY_QUEUE * TALLY_BATCH)
    expect(calls).toEqual(Array.from({ length: 2 * TALLY_QUEUE }, () => TALLY_BATCH))
  })

  it('rejects with the first failure, and still frees the queue after one', async () => {
    let n = 0
    const failures = [new Error('failure 1'), new Error('failure 2')]
    const tally = createTokenTally(async (text) => {
      n++
      if (n <= 2) throw failures[n - 1]
      return text.length
    })
    tally.add('a'.repeat(TALLY_BATCH))
    tally.add('b'.repeat(TALLY_BATCH))
    await turn()
    expect(tally.heldLength()).toBe(0)
    for (let b = 0; b < TALLY_QUEUE; b++) tally.add('c'.repeat(TALLY_BATCH))
    await turn()
    expect(n).toBe(2 + TALLY_QUEUE)
    await expect(tally.total()).rejects.toBe(failures[0])
  })
})

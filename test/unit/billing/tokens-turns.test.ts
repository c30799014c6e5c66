import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'

// countTokens's turns of the event loop, with a stand-in tokenizer and a clock the test moves: each
// call to the tokenizer takes `msPerCall` milliseconds of that clock, whatever the machine's speed.

const state = vi.hoisted(() => ({
  clock: 0,
  msPerCall: 0,
  /** Bumped by a microtask, so it changes only when countTokens gives the event loop a turn. */
  turn: 0,
  bumping: false,
  /** Characters handed to the tokenizer in each turn. */
  perTurn: [] as number[],
  lastTurn: -1,
  options: [] as unknown[],
}))

vi.mock('gpt-tokenizer/encoding/o200k_base', () => ({
  setMergeCacheSize: vi.fn(),
  countTokens: (text: string, options: unknown) => {
    state.options.push(options)
    if (state.lastTurn !== state.turn) state.perTurn.push(0)
    state.lastTurn = state.turn
    state.perTurn[state.perTurn.length - 1]! += text.length
    if (!state.bumping) {
      state.bumping = true
      queueMicrotask(() => {
        state.turn++
        state.bumping = false
      })
    }
    state.clock += state.msPerCall
    // Two tokens a piece, so the sum is easy to tell.
    return 2
  },
}))

const { COUNT_SLICE, PIECE_TEXT, countTokens, countingPieces, loadCounter } =
  await import('../../../src/billing/tokens.ts')
const tokenizer = await import('gpt-tokenizer/encoding/o200k_base')

/** Words of 8 characters, a space before each: countingPieces cuts it into pieces of PIECE_TEXT exactly. */
const words = (length: number) => 'abcdefgh' + ' abcdefg'.repeat(length / 8 - 1)

beforeEach(() => {
  state.clock = 0
  state.msPerCall = 0
  state.perTurn = []
  state.lastTurn = -1
  state.options = []
  vi.spyOn(performance, 'now').mockImplementation(() => state.clock)
})

afterEach(() => {
  vi.restoreAllMocks()
})

describe('countTokens turns', () => {
  it('loads the tokenizer once, with a bounded merge cache', async () => {
    const [a, b] = await Promise.all([loadCounter(), loadCounter()])
    expect(a).toBe(b)
    expect(await countTokens('x')).toBe(2)
    expect(tokenizer.setMergeCacheSize).toHaveBeenCalledExactlyOnceWith(10_000)
    expect(state.options).toEqual([{ disallowedSpecial: new Set() }])
  })

  it('gives the event loop a turn after each COUNT_SLICE characters when counting is quick', async () => {
    const text = words(40 * PIECE_TEXT)
    const pieces = [...countingPieces(text)]
    expect(pieces.length).toBe(40)
    expect(new Set(pieces.map((p) => p.length))).toEqual(new Set([PIECE_TEXT]))
    expect(await countTokens(text)).toBe(2 * 40)
    expect(state.perTurn).toEqual([COUNT_SLICE, COUNT_SLICE, 8 * PIECE_TEXT])
  })

  it('gives the event loop a turn after each 2 ms of counting when counting is slow', async () => {
    state.msPerCall = 1
    expect(await countTokens(words(7 * PIECE_TEXT))).toBe(2 * 7)
    expect(state.perTurn).toEqual([2048, 2048, 2048, 1024])
  })

  it('counts text shorter than a piece in one call', async () => {
    state.msPerCall = 1
    expect(await countTokens('Hello, world!')).toBe(2)
    expect(await countTokens('')).toBe(0)
    expect(state.perTurn).toEqual([13])
  })
})

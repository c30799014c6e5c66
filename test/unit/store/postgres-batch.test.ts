import { describe, expect, it } from 'vitest'
import { createBatcher } from '../../../src/store/postgres/batch.ts'

// The group-commit queue on its own: a fake runner that answers when the test says so.

function manualRunner() {
  const batches: { items: number[]; answer: (fail?: unknown) => void }[] = []
  const run = (items: number[]) =>
    new Promise<PromiseSettledResult<number>[]>((resolve, reject) => {
      batches.push({
        items,
        answer: (fail) =>
          fail === undefined
            ? resolve(
                items.map((n) =>
                  n < 0
                    ? { status: 'rejected', reason: new Error(`bad ${n}`) }
                    : { status: 'fulfilled', value: n * 10 },
                ),
              )
            : reject(fail),
      })
    })
  return { batches, run }
}
const turn = () => new Promise((resolve) => setImmediate(resolve))

describe('createBatcher', () => {
  it('sends the calls of one turn together, and those made while the batch is out as the next one', async () => {
    const { batches, run } = manualRunner()
    const call = createBatcher(run, { maxInFlight: 1, maxBatch: 100 })
    const first = [call(1), call(2), call(3)]
    await turn()
    expect(batches.map((b) => b.items)).toEqual([[1, 2, 3]])
    const second = [call(4), call(5)]
    await turn()
    const third = call(6)
    await turn()
    // One batch out at most: 4, 5 and 6 wait, and leave together.
    expect(batches).toHaveLength(1)
    batches[0]!.answer()
    expect(await Promise.all(first)).toEqual([10, 20, 30])
    await turn()
    expect(batches.map((b) => b.items)).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ])
    batches[1]!.answer()
    expect(await Promise.all([...second, third])).toEqual([40, 50, 60])
  })

  it('caps a batch at maxBatch and lets maxInFlight batches out at once', async () => {
    const { batches, run } = manualRunner()
    const sizes: number[] = []
    const call = createBatcher(run, { maxInFlight: 2, maxBatch: 2, onBatch: (n) => sizes.push(n) })
    const all = [1, 2, 3, 4, 5].map((n) => call(n))
    await turn()
    await turn()
    expect(batches.map((b) => b.items)).toEqual([
      [1, 2],
      [3, 4],
    ])
    batches[0]!.answer()
    await turn()
    await turn()
    expect(batches.map((b) => b.items)).toEqual([[1, 2], [3, 4], [5]])
    batches[1]!.answer()
    batches[2]!.answer()
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40, 50])
    expect(sizes).toEqual([2, 2, 1])
  })

  it('fails each item as its runner says, and the whole batch when the runner fails', async () => {
    const { batches, run } = manualRunner()
    const call = createBatcher(run, { maxInFlight: 1, maxBatch: 100 })
    const mixed = Promise.allSettled([call(1), call(-1)])
    await turn()
    batches[0]!.answer()
    expect((await mixed).map((r) => r.status)).toEqual(['fulfilled', 'rejected'])
    const lost = Promise.allSettled([call(2), call(3)])
    await turn()
    batches[1]!.answer(new Error('connection lost'))
    expect((await lost).map((r) => r.status === 'rejected' && String(r.reason))).toEqual([
      'Error: connection lost',
      'Error: connection lost',
    ])
    // And the queue goes on after a failed batch.
    const after = call(4)
    await turn()
    batches[2]!.answer()
    expect(await after).toBe(40)
  })
})

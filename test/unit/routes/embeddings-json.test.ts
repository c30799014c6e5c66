import { describe, expect, it } from 'vitest'
import { embeddingsJsonSteps, SERIALIZE_UNITS_PER_CHECKPOINT } from '../../../src/routes/embeddings.ts'
import { finishNow } from '../../../src/turns.ts'
import type { EmbeddingsResponse } from '../../../src/domain/chat.ts'

const answer = (inputs: number, dims: number): EmbeddingsResponse => ({
  object: 'list',
  data: Array.from({ length: inputs }, (_, index) => ({
    object: 'embedding' as const,
    index,
    embedding: Array.from({ length: dims }, (_, j) => Math.sin(index * 31 + j) / 3),
  })),
  model: 'mock/embed',
  usage: { prompt_tokens: inputs * 2, total_tokens: inputs * 2 },
})

describe('embeddingsJsonSteps', () => {
  it('gives the text JSON.stringify gives, field order included, for floats and base64 vectors', () => {
    for (const body of [
      answer(0, 0),
      answer(1, 3),
      answer(5, 17),
      {
        ...answer(2, 4),
        data: [{ object: 'embedding' as const, index: 0, embedding: 'AAAAPw==' }],
        extra: null,
      },
      { ...answer(1, 2), skipped: undefined },
    ]) {
      expect(finishNow(embeddingsJsonSteps(body))).toBe(JSON.stringify(body))
    }
  })

  it('reaches a checkpoint every SERIALIZE_UNITS_PER_CHECKPOINT floats: 2 048 vectors of 256 are sliced', () => {
    const body = answer(2048, 256)
    const work = embeddingsJsonSteps(body)
    let checkpoints = 0
    let step = work.next()
    for (; !step.done; step = work.next()) checkpoints++
    expect(checkpoints).toBe(Math.floor((2048 * 256) / SERIALIZE_UNITS_PER_CHECKPOINT))
    expect(JSON.parse(step.value)).toEqual(body)
  })
})

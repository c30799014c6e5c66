import { describe, expect, it } from 'vitest'
import { GatewayError } from '../../../src/errors.ts'
import { parseEmbeddingsRequest } from '../../../src/schemas/embeddings.ts'

const minimal = { model: 'openai/text-embedding-3-small', input: 'hello' }

const withFields = (patch: Record<string, unknown>): Record<string, unknown> => ({ ...minimal, ...patch })

function rejection(body: unknown): GatewayError {
  try {
    parseEmbeddingsRequest(body)
  } catch (e) {
    if (e instanceof GatewayError) return e
    throw e
  }
  throw new Error('expected the request to be rejected')
}

describe('parseEmbeddingsRequest: valid requests', () => {
  it('accepts the minimal request unchanged', () => {
    expect(parseEmbeddingsRequest(minimal)).toEqual(minimal)
  })

  it('accepts every optional field and keeps unknown fields', () => {
    const body = {
      model: 'voyage/voyage-3',
      input: ['first text', 'second text'],
      dimensions: 256,
      encoding_format: 'base64',
      input_type: 'search_query',
      user: 'user-1',
      truncate: 'END',
      extra: { nested: true },
    }
    const parsed = parseEmbeddingsRequest(body)
    expect(parsed).toEqual(body)
    expect(parsed.truncate).toBe('END')
  })

  it.each<[string, unknown]>([
    ['2048 strings', Array(2048).fill('x')],
    ['a token array', [1, 2, 3]],
    ['a token array longer than 2048 tokens', Array(3000).fill(7)],
    ['token arrays', [[1, 2], [3]]],
    ['300 000 tokens, the most in all', [Array(299_999).fill(1), [0]]],
  ])('accepts %s as input', (_, input) => {
    const body = withFields({ input })
    expect(parseEmbeddingsRequest(body)).toEqual(body)
  })
  it('accepts dimensions up to 65 536', () => {
    expect(parseEmbeddingsRequest(withFields({ dimensions: 65_536 })).dimensions).toBe(65_536)
  })
})

describe('parseEmbeddingsRequest: rejected requests', () => {
  it.each<[string, unknown, string | null, string]>([
    ['a null body', null, null, 'invalid_value'],
    ['an array body', [minimal], null, 'invalid_value'],
    ['a missing model', { input: 'x' }, 'model', 'missing_field'],
    // A bare name is well-formed (it may be an alias); one with a space is not.
    ['a model with a space', withFields({ model: 'text embedding' }), 'model', 'invalid_value'],
    ['a model with an empty name', withFields({ model: 'openai/' }), 'model', 'invalid_value'],
    ['a missing input', { model: minimal.model }, 'input', 'missing_field'],
    ['a null input', withFields({ input: null }), 'input', 'invalid_value'],
    ['an empty string input', withFields({ input: '' }), 'input', 'invalid_value'],
    ['an empty input array', withFields({ input: [] }), 'input', 'invalid_value'],
    ['2049 inputs', withFields({ input: Array(2049).fill('x') }), 'input', 'invalid_value'],
    ['2049 token arrays', withFields({ input: Array(2049).fill([1]) }), 'input', 'invalid_value'],
    // When one branch of the input union fails only on an item, zod reports that item.
    ['an empty string among the inputs', withFields({ input: ['a', ''] }), 'input[1]', 'invalid_value'],
    ['mixed strings and numbers', withFields({ input: ['a', 1] }), 'input[1]', 'invalid_value'],
    ['mixed numbers and strings', withFields({ input: [1, 'a'] }), 'input[1]', 'invalid_value'],
    ['a negative token', withFields({ input: [1, -2] }), 'input[1]', 'invalid_value'],
    ['a fractional token', withFields({ input: [1.5] }), 'input[0]', 'invalid_value'],
    ['a token past the safe integers', withFields({ input: [2 ** 53] }), 'input[0]', 'invalid_value'],
    [
      'a bad token in the second array',
      withFields({ input: [[1], [2, -1]] }),
      'input[1][1]',
      'invalid_value',
    ],
    ['300 001 tokens', withFields({ input: Array(300_001).fill(1) }), 'input', 'invalid_value'],
    [
      '300 001 tokens in arrays',
      withFields({ input: [Array(300_000).fill(1), [1]] }),
      'input',
      'invalid_value',
    ],
    ['an empty token array', withFields({ input: [[1], []] }), 'input[1]', 'invalid_value'],
    ['a numeric input', withFields({ input: 5 }), 'input', 'invalid_value'],
    ['dimensions 0', withFields({ dimensions: 0 }), 'dimensions', 'invalid_value'],
    ['dimensions 1.5', withFields({ dimensions: 1.5 }), 'dimensions', 'invalid_value'],
    ['string dimensions', withFields({ dimensions: '256' }), 'dimensions', 'invalid_value'],
    ['dimensions 65 537', withFields({ dimensions: 65_537 }), 'dimensions', 'invalid_value'],
    ['encoding_format int8', withFields({ encoding_format: 'int8' }), 'encoding_format', 'invalid_value'],
    ['a non-string input_type', withFields({ input_type: 1 }), 'input_type', 'invalid_value'],
    ['a non-string user', withFields({ user: 42 }), 'user', 'invalid_value'],
  ])('rejects %s', (_, body, param, code) => {
    const e = rejection(body)
    expect(e.status).toBe(400)
    expect(e.type).toBe('invalid_request_error')
    expect(e.param).toBe(param)
    expect(e.code).toBe(code)
  })
})

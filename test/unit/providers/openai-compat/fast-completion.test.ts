import { readdirSync, readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { fastOpenAICompletion, openAICompletionSchema } from '../../../../src/providers/openai-compat/wire.ts'

// The hand-written check of a blocking answer must give zod's object to the key, in zod's key order
// (the answer's bytes come from it), and leave to zod every answer it does not take as it is.

const answer = {
  id: 'chatcmpl-1',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: 'gpt-4o-mini',
  choices: [
    {
      index: 0,
      message: { role: 'assistant', content: 'Hello', refusal: null },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: { prompt_tokens: 8, completion_tokens: 9, total_tokens: 17 },
  system_fingerprint: 'fp_1',
}

type Json = Record<string, unknown>
const clone = (v: unknown): Json => JSON.parse(JSON.stringify(v)) as Json
const choice0 = (v: Json): Json => (v.choices as Json[])[0]!

/** Variants of the answer: keys moved, dropped, added, retyped. */
function variants(): unknown[] {
  const out: unknown[] = [clone(answer)]
  const edit = (f: (v: Json) => void) => {
    const v = clone(answer)
    f(v)
    out.push(v)
  }
  // Key orders: reversed at every level.
  edit((v) => {
    const rev = (o: Json): Json => Object.fromEntries(Object.entries(o).reverse())
    const c = rev(choice0(v))
    c.message = rev(c.message as Json)
    v.choices = [c]
    v.usage = rev(v.usage as Json)
    for (const k of Object.keys(v).reverse()) {
      const x = v[k]
      delete v[k]
      v[k] = x
    }
  })
  for (const key of ['id', 'created', 'model', 'choices', 'usage', 'object']) edit((v) => delete v[key])
  for (const key of ['index', 'message', 'finish_reason', 'logprobs']) edit((v) => delete choice0(v)[key])
  for (const key of ['role', 'content', 'refusal']) edit((v) => delete (choice0(v).message as Json)[key])
  for (const key of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    edit((v) => delete (v.usage as Json)[key])
  const odd: unknown[] = [null, 1, 'x', true, [], {}, [1], { a: 1 }, -0.5]
  for (const value of odd) {
    for (const key of ['id', 'created', 'model', 'choices', 'usage']) edit((v) => (v[key] = value))
    for (const key of ['index', 'message', 'finish_reason']) edit((v) => (choice0(v)[key] = value))
    for (const key of ['role', 'content']) edit((v) => ((choice0(v).message as Json)[key] = value))
    for (const key of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
      edit((v) => ((v.usage as Json)[key] = value))
    edit((v) => (v.choices = [choice0(v), value]))
  }
  edit((v) => (choice0(v).message = { role: 'assistant', content: null, reasoning_content: 'r' }))
  edit((v) => (v.usage = { total_tokens: 3, prompt_tokens: 1, prompt_tokens_details: { cached_tokens: 0 } }))
  edit((v) => (v.choices = []))
  edit((v) => (v['7'] = 'a numeric key'))
  out.push(JSON.parse('{"__proto__":{"x":1},"choices":[]}'))
  out.push(JSON.parse('{"choices":[{"index":0,"message":{"__proto__":1},"finish_reason":null}]}'))
  out.push(null, [], 'text', 3)
  return out
}

function fixtures(): unknown[] {
  const dir = new URL('../../../fixtures/openai-compat/', import.meta.url)
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as unknown)
}

describe('fastOpenAICompletion', () => {
  it('takes the usual answer', () => {
    expect(fastOpenAICompletion(clone(answer))).toBeDefined()
  })

  it('gives what zod gives, key for key and in the same order, or leaves the answer to zod', () => {
    let taken = 0
    for (const v of [...variants(), ...fixtures()]) {
      const fast = fastOpenAICompletion(v)
      const zod = openAICompletionSchema.safeParse(v)
      if (fast === undefined) continue
      taken++
      expect(zod.success, JSON.stringify(v)).toBe(true)
      expect(JSON.stringify(fast)).toBe(JSON.stringify(zod.data))
      expect(fast).toStrictEqual(zod.data)
    }
    expect(taken).toBeGreaterThan(20)
  })

  it('takes every answer zod takes, in these variants', () => {
    for (const v of variants()) {
      const zod = openAICompletionSchema.safeParse(v)
      if (zod.success && !JSON.stringify(v).includes('__proto__'))
        expect(fastOpenAICompletion(v), JSON.stringify(v)).toBeDefined()
    }
  })
})

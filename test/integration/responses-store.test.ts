import OpenAI from 'openai'
import { describe, expect, it, onTestFinished } from 'vitest'
import {
  sendJson,
  sendSse,
  sentBody,
  startFakeUpstream,
  type FakeUpstream,
} from '../support/fake-upstream.ts'
import { startGateway, type TestGateway } from '../support/gateway.ts'
import { useTestDatabase } from '../support/postgres.ts'

// Stored responses: `store` (the default) keeps an answer per account, previous_response_id continues
// it on any instance of one database, GET and DELETE /v1/responses/{id} read and remove it.

const database = useTestDatabase()

const accounts = [
  { id: 'alice', keys: ['sk-alice-0000000001'], credits: 10 },
  { id: 'bob', keys: ['sk-bob-00000000000001'], credits: 10 },
]

/** A fake OpenAI-compatible upstream answering turn n with "answer n". */
async function fakeOpenAi(): Promise<FakeUpstream> {
  let n = 0
  const usage = { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 }
  const fake = await startFakeUpstream({
    'POST /v1/chat/completions': (req, res) => {
      const content = `answer ${++n}`
      if ((req.body as { stream?: boolean }).stream !== true) {
        sendJson(res, 200, {
          id: 'chatcmpl-1',
          object: 'chat.completion',
          created: 1,
          model: 'gpt-4o-mini',
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage,
        })
        return
      }
      const chunk = (delta: object, finish: string | null, u: object | null = null) =>
        JSON.stringify({
          id: 'chatcmpl-1',
          object: 'chat.completion.chunk',
          created: 1,
          model: 'gpt-4o-mini',
          choices: u ? [] : [{ index: 0, delta, finish_reason: finish }],
          usage: u,
        })
      return sendSse(res, [
        chunk({ role: 'assistant', content }, null),
        chunk({}, 'stop'),
        chunk({}, null, usage),
        '[DONE]',
      ])
    },
  })
  onTestFinished(() => fake.close())
  return fake
}

async function gateway(fake: FakeUpstream, databaseUrl = 'memory'): Promise<TestGateway> {
  const gw = await startGateway({
    env: {
      OPENAI_API_KEY: 'sk-fake-upstream',
      OPENAI_BASE_URL: `${fake.origin}/v1`,
      GATEWAY_DATABASE_URL: databaseUrl,
    },
    file: { accounts },
    listen: true,
  })
  onTestFinished(() => gw.close())
  return gw
}

const sdk = (gw: TestGateway, key = 'sk-alice-0000000001') =>
  new OpenAI({ baseURL: `${gw.origin}/v1`, apiKey: key, maxRetries: 0 })

const MODEL = 'openai/gpt-4o-mini'

describe('stored responses', () => {
  it('continues a conversation with previous_response_id across two instances on one PostgreSQL', async () => {
    const fake = await fakeOpenAi()
    const { url } = await database()
    const [a, b] = [await gateway(fake, url), await gateway(fake, url)]
    const first = await sdk(a).responses.create({
      model: MODEL,
      instructions: 'Be brief',
      input: 'first question',
    })
    expect((first as unknown as { store: boolean }).store).toBe(true)
    // Streamed on the other instance: it was stored before its last event.
    const stream = sdk(b).responses.stream({
      model: MODEL,
      input: 'second question',
      previous_response_id: first.id,
    })
    const second = await stream.finalResponse()
    expect(second.previous_response_id).toBe(first.id)
    const third = await sdk(a).responses.create({
      model: MODEL,
      input: 'third question',
      previous_response_id: second.id,
    })
    expect(third.output_text).toBe('answer 3')
    // Instructions are the request's own, never carried over (as OpenAI does).
    expect(sentBody(fake, 2).messages).toEqual([
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'answer 1' },
      { role: 'user', content: 'second question' },
      { role: 'assistant', content: 'answer 2' },
      { role: 'user', content: 'third question' },
    ])
    expect(sentBody(fake, 0).messages[0]).toEqual({ role: 'system', content: 'Be brief' })
    // GET on either instance gives the answer as it was sent.
    expect(await sdk(b).responses.retrieve(first.id)).toMatchObject({
      id: first.id,
      output: first.output,
      usage: first.usage,
    })
  })

  it('keeps each account’s responses its own: another account’s id is a 404', async () => {
    const gw = await gateway(await fakeOpenAi())
    const mine = await sdk(gw).responses.create({ model: MODEL, input: 'secret' })
    const bob = sdk(gw, 'sk-bob-00000000000001')
    for (const call of [
      () => bob.responses.retrieve(mine.id),
      () => bob.responses.delete(mine.id),
      () => bob.responses.create({ model: MODEL, input: 'more', previous_response_id: mine.id }),
    ]) {
      const err = await call().catch((e: unknown) => e)
      expect(err).toBeInstanceOf(OpenAI.NotFoundError)
      expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
        code: 'response_not_found',
      })
    }
    expect((await sdk(gw).responses.retrieve(mine.id)).id).toBe(mine.id)
  })

  it('deletes a stored response, and keeps nothing with store: false', async () => {
    const fake = await fakeOpenAi()
    const gw = await gateway(fake)
    const client = sdk(gw)
    const kept = await client.responses.create({ model: MODEL, input: 'keep me' })
    const res = await fetch(`${gw.origin}/v1/responses/${kept.id}`, {
      method: 'DELETE',
      headers: { authorization: 'Bearer sk-alice-0000000001' },
    })
    expect(await res.json()).toEqual({ id: kept.id, object: 'response', deleted: true })
    await expect(client.responses.retrieve(kept.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError)

    const unstored = await client.responses.create({ model: MODEL, input: 'forget me', store: false })
    expect((unstored as unknown as { store: boolean }).store).toBe(false)
    await expect(client.responses.retrieve(unstored.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError)
    const err = await client.responses
      .create({ model: MODEL, input: 'again', previous_response_id: unstored.id })
      .catch((e: unknown) => e)
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
      code: 'response_not_found',
      param: 'previous_response_id',
    })
    // A request refused before the upstream is never called.
    expect(fake.requests).toHaveLength(2)
  })

  it('continues a tool call: the stored function call, then its output in the next request', async () => {
    const fake = await startFakeUpstream({
      'POST /v1/chat/completions': (req, res) => {
        const first = fake.requests.length === 1
        sendJson(res, 200, {
          id: 'chatcmpl-1',
          object: 'chat.completion',
          created: 1,
          model: 'gpt-4o-mini',
          choices: [
            {
              index: 0,
              message: first
                ? {
                    role: 'assistant',
                    content: null,
                    tool_calls: [
                      { id: 'call_1', type: 'function', function: { name: 'now', arguments: '{}' } },
                    ],
                  }
                : { role: 'assistant', content: 'It is noon.' },
              finish_reason: first ? 'tool_calls' : 'stop',
            },
          ],
          usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 },
        })
      },
    })
    onTestFinished(() => fake.close())
    const client = sdk(await gateway(fake))
    const tools: OpenAI.Responses.FunctionTool[] = [
      { type: 'function', name: 'now', parameters: { type: 'object', properties: {} }, strict: false },
    ]
    const first = await client.responses.create({ model: MODEL, input: 'What time is it?', tools })
    const second = await client.responses.create({
      model: MODEL,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: 'call_1', output: '12:00' }],
      tools,
    })
    expect(second.output_text).toBe('It is noon.')
    expect(sentBody(fake, 1).messages).toEqual([
      { role: 'user', content: 'What time is it?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'now', arguments: '{}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '12:00' },
    ])
  })

  it('resolves item_reference items to the stored output items they name, for their account only', async () => {
    const fake = await fakeOpenAi()
    const gw = await gateway(fake)
    const first = await sdk(gw).responses.create({ model: MODEL, input: 'first question' })
    const itemId = first.output[0]!.id!
    const second = await sdk(gw).responses.create({
      model: MODEL,
      input: [
        { role: 'user', content: 'first question' },
        { type: 'item_reference', id: itemId },
        { role: 'user', content: 'second question' },
      ],
    })
    expect(second.output_text).toBe('answer 2')
    expect(sentBody(fake, 1).messages).toEqual([
      { role: 'user', content: 'first question' },
      { role: 'assistant', content: 'answer 1' },
      { role: 'user', content: 'second question' },
    ])
    for (const [client, id] of [
      [sdk(gw, 'sk-bob-00000000000001'), itemId],
      [sdk(gw), `${itemId}9`],
      [sdk(gw), 'msg_nothing'],
    ] as const) {
      const err = await client.responses
        .create({ model: MODEL, input: [{ type: 'item_reference', id }] })
        .catch((e: unknown) => e)
      expect(err).toBeInstanceOf(OpenAI.NotFoundError)
      expect((err as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
        code: 'response_not_found',
        param: 'input[0].id',
      })
    }
    expect(fake.requests).toHaveLength(2)
  })
})
